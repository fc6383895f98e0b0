"""Starts tests/e2e/job.py as a real process and waits until it is ready."""

import subprocess
import sys
from pathlib import Path

import pytest

from daemon import kill_group

JOB = Path(__file__).with_name("job.py")


def start_job(*args, stdout=None, env=None, cwd=None, argv_extra=()):
    """Runs job.py with `args`; returns the Popen once it printed `ready`.
    `argv_extra` is appended after a `--` the job ignores."""
    p = subprocess.Popen(
        [sys.executable, str(JOB), *args, *(("--", *argv_extra) if argv_extra else ())],
        stdout=subprocess.PIPE,
        stderr=stdout or subprocess.DEVNULL,
        env=env,
        cwd=cwd,
        start_new_session=True,
    )
    line = p.stdout.readline().decode()
    assert line.startswith("ready"), f"job did not start: {line!r}"
    return p


stop_job = kill_group  # job.py runs in a session of its own


@pytest.fixture
def job_factory():
    started = []

    def make(*args, **kwargs):
        p = start_job(*args, **kwargs)
        started.append(p)
        return p

    yield make
    for p in started:
        stop_job(p)
