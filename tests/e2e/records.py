"""A company-wide data helper shared by several jobs (placejob.py): one
slow line, `load_record`'s parse, that every job calling it stalls on.

The record is sized when this module is imported so that one parse takes
about PARSE_S on the machine at hand: a fixed size parses in 0.1 s on one
machine and 0.3 s on another, and a call under three sampling periods
(150 ms at 20 Hz) is given no figure."""

import json
import time

PARSE_S = 0.3


def _record(items):
    return json.dumps({"pixels": list(range(items)), "label": 3})


def _sized():
    trial = 200_000
    text = _record(trial)
    took = []
    for _ in range(3):  # the least of three: the machine's speed, not a moment's load
        start = time.perf_counter()
        json.loads(text)
        took.append(time.perf_counter() - start)
    took = max(min(took), 1e-4)
    return _record(min(12_000_000, max(trial, int(trial * PARSE_S / took))))


RECORD = _sized()


def load_record(i):
    return len(json.loads(RECORD)["pixels"]) + i  # the slow line: one parse, about PARSE_S
