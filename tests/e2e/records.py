"""A company-wide data helper shared by several jobs (placejob.py): one
slow line, `load_record`'s parse, that every job calling it stalls on."""

import json

RECORD = json.dumps({"pixels": list(range(20_000)), "label": 3})


def load_record(i):
    start = 0
    for _ in range(12):
        start += len(json.loads(RECORD)["pixels"])  # the slow line
    return start + i
