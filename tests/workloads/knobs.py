"""The job's switchable knobs (one set before the onset, another after it) and
small Linux helpers (thread names, parent-death signal)."""

import ctypes
import time
from types import SimpleNamespace

PR_SET_PDEATHSIG = 1
PR_SET_NAME = 15

# Knobs a scenario may change at its onset (`--then NAME=VALUE`), with types.
SWITCHABLE = {
    "python_work_ms": float,   # GIL-bound Python CPU per sample
    "sleep_ms": float,         # time.sleep per sample in the map function
    "read_bytes": int,         # blocking read per sample from the data file
    "workers": int,            # active map workers (at most the number started)
    "map_after_batch": bool,   # per-sample work done per batch in one thread
    "step_kernel": float,      # GPU seconds per batch
    "shard_samples": int,      # samples per shard (0: no shards)
    "shard_open_ms": float,    # every worker waits this long when a shard opens
    "cache_grow_mib_per_s": float,  # in-RAM cache growth (already time-scaled)
    "spill_mib_per_s": float,  # cache spill writes once the RAM cache is full
}


def parse_value(name, text):
    kind = SWITCHABLE[name]
    if kind is bool:
        return text.lower() in ("1", "true", "yes", "on")
    return kind(text)


class Knobs:
    def __init__(self, before, after=None, onset_at=None):
        self.before = dict(before)
        self.after = {**self.before, **(after or {})}
        self.onset_at = onset_at
        self._before = SimpleNamespace(**self.before)
        self._after = SimpleNamespace(**self.after)

    def now(self):
        if self.onset_at is not None and time.monotonic() >= self.onset_at:
            return self._after
        return self._before

    def to_json(self):
        return {"before": self.before, "after": self.after, "onset_at": self.onset_at}

    @classmethod
    def from_json(cls, value):
        return cls(value["before"], value["after"], value["onset_at"])


def _libc():
    return ctypes.CDLL(None, use_errno=True)


def name_thread(name):
    """Sets the calling thread's name (`comm`, 15 bytes at most)."""
    _libc().prctl(PR_SET_NAME, name.encode()[:15], 0, 0, 0)


def set_parent_death_signal(sig):
    _libc().prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0)
