"""The simulated GPU: a small shared file, mapped with mmap, in which each job
process keeps a slot saying which GPU it uses, how much memory it holds and how
long its "kernels" have kept the GPU busy.

Jobs only store into mapped memory (no write() and no pipe), so the link adds
nothing to `wchar` in /proc/<pid>/io: the daemon's progress signal stays the
job's own output. The orchestrator reads the slots and turns busy time into
utilization, power and per-process figures for the stand-in NVML library.

Times are CLOCK_MONOTONIC seconds (`time.monotonic()`), shared by all
processes of the host. Each slot has one writer (the process that registered
it) and is guarded by a sequence counter (odd while being written), so readers
never see a half-updated slot.
"""

import contextlib
import fcntl
import mmap
import os
import signal
import struct
import sys
import time
import traceback

MAGIC = b"SWGPULNK"
HEADER = struct.Struct("<8sII")  # magic, version, slot count
SLOT = struct.Struct("<QqqqddqdQ")  # seq, pid, gpu, memory, busy_total, busy_since, low_power, sm_share, start_ticks
SLOT_SIZE = 128
SLOTS = 64
VERSION = 1


def process_stat(pid):
    """A process's state letter (`R`, `S`, `T` stopped, `Z` exited but not yet
    reaped...) and start time in clock ticks (field 22 of stat), or None if gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        return fields[0].decode(), int(fields[19])
    except (OSError, IndexError, ValueError):
        return None


def process_start_ticks(pid):
    """Start time of a process in clock ticks, or None if gone."""
    stat = process_stat(pid)
    return stat[1] if stat else None


class GpuLink:
    """A mapped link file. `create` makes it (orchestrator), `attach` opens it (job)."""

    def __init__(self, path, fd, mem):
        self.path = path
        self._fd = fd
        self._mem = mem

    @classmethod
    def create(cls, path):
        size = HEADER.size + SLOTS * SLOT_SIZE
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o666)
        os.ftruncate(fd, size)
        mem = mmap.mmap(fd, size)
        HEADER.pack_into(mem, 0, MAGIC, VERSION, SLOTS)
        return cls(path, fd, mem)

    @classmethod
    def attach(cls, path):
        fd = os.open(path, os.O_RDWR)
        mem = mmap.mmap(fd, os.fstat(fd).st_size)
        magic, version, slots = HEADER.unpack_from(mem, 0)
        if magic != MAGIC or version != VERSION or slots != SLOTS:
            raise ValueError(f"{path} is not a GPU link file")
        return cls(path, fd, mem)

    def _offset(self, index):
        return HEADER.size + index * SLOT_SIZE

    def register(self, pid, gpu, memory_bytes, sm_share=1.0):
        """Claims a free slot for `pid` (a slot whose process is gone counts as free)."""
        with self._locked():
            for index in range(SLOTS):
                fields = self._read(index)
                owner = fields[1]
                if owner and process_start_ticks(owner) == fields[8]:
                    continue
                slot = Slot(self, index)
                slot._store(pid=pid, gpu=gpu, memory=memory_bytes, busy_total=0.0,
                            busy_since=0.0, low_power=0, sm_share=sm_share,
                            start_ticks=process_start_ticks(pid) or 0)
                return slot
        raise RuntimeError(f"no free slot in {self.path}")

    @contextlib.contextmanager
    def _locked(self):
        fcntl.flock(self._fd, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(self._fd, fcntl.LOCK_UN)

    def _read(self, index):
        """One consistent copy of a slot's fields (retries while it is being written;
        gives up after ~20 ms, when its writer must have died mid-update)."""
        offset = self._offset(index)
        for attempt in range(200):
            fields = SLOT.unpack_from(self._mem, offset)
            if fields[0] % 2 == 0 and SLOT.unpack_from(self._mem, offset)[0] == fields[0]:
                return fields
            time.sleep(0 if attempt < 100 else 0.0002)
        return fields

    def slots(self):
        """Registered slots as dicts: pid, gpu, memory_bytes, busy_seconds (cumulative,
        counting a kernel in progress up to `now`), busy, low_power, sm_share, start_ticks."""
        now = time.monotonic()
        out = []
        for index in range(SLOTS):
            _, pid, gpu, memory, total, since, low, share, ticks = self._read(index)
            if not pid:
                continue
            busy = since > 0
            out.append({
                "slot": index, "pid": pid, "gpu": gpu, "memory_bytes": memory,
                "busy_seconds": total + (max(0.0, now - since) if busy else 0.0),
                "busy": busy, "low_power": bool(low), "sm_share": share,
                "start_ticks": ticks, "at": now,
            })
        return out

    def close(self):
        self._mem.close()
        os.close(self._fd)


class Slot:
    """The job side of one registered process."""

    def __init__(self, link, index):
        self.link = link
        self.index = index

    def _store(self, **changes):
        mem, offset = self.link._mem, self.link._offset(self.index)
        fields = list(SLOT.unpack_from(mem, offset))
        names = ["seq", "pid", "gpu", "memory", "busy_total", "busy_since",
                 "low_power", "sm_share", "start_ticks"]
        seq = fields[0] | 1  # odd: being written
        struct.pack_into("<Q", mem, offset, seq)
        for name, value in changes.items():
            fields[names.index(name)] = value
        fields[0] = seq
        SLOT.pack_into(mem, offset, *fields)
        struct.pack_into("<Q", mem, offset, seq + 1)

    def _get(self, position):
        return SLOT.unpack_from(self.link._mem, self.link._offset(self.index))[position]

    def set_memory(self, memory_bytes):
        self._store(memory=memory_bytes)

    def begin(self, low_power=False):
        self._store(busy_since=time.monotonic(), low_power=int(low_power))

    def end(self):
        since = self._get(5)
        if since > 0:
            total = self._get(4) + max(0.0, time.monotonic() - since)
            self._store(busy_total=total, busy_since=0.0, low_power=0)

    @contextlib.contextmanager
    def kernel(self):
        """GPU busy for the duration of the block (the launch plus its sync)."""
        self.begin()
        try:
            yield
        finally:
            self.end()

    def run_kernel(self, seconds):
        """A kernel of `seconds`: the calling thread sleeps while it "runs"."""
        with self.kernel():
            time.sleep(max(0.0, seconds))

    def spin_forever(self, low_power=True):
        """A kernel that never ends (a hung collective): busy until the process exits."""
        self.begin(low_power=low_power)
        while True:
            time.sleep(3600)

    def release(self):
        self._store(pid=0, gpu=0, memory=0, busy_total=0.0, busy_since=0.0,
                    low_power=0, sm_share=0.0, start_ticks=0)


def run_job(link_path, body):
    """A job's life on the link: runs `body(take)`, where `take(gpu, memory_bytes)`
    registers the calling process on a GPU and returns its slot. SIGTERM ends the
    job with status 0, an exception with its traceback and 1; the slots are
    released either way, and the process ends with os._exit, so daemonic children
    (DataLoader workers) go with it."""
    link = GpuLink.attach(link_path)
    slots = []

    def take(gpu, memory_bytes):
        slots.append(link.register(os.getpid(), gpu, memory_bytes))
        return slots[-1]

    def on_term(*_):
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, on_term)
    code = 0
    try:
        body(take)
    except SystemExit as e:
        code = e.code or 0
    except BaseException:
        traceback.print_exc()
        code = 1
    finally:
        for slot in slots:
            slot.release()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
