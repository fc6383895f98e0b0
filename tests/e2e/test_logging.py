"""Log lines of the real daemon: coloured on a terminal only, never with
NO_COLOR, plain in a file or pipe, and with a syslog priority per line when
stderr is the stream JOURNAL_STREAM names (as under systemd; the journal
itself is checked in test_package_systemd.py)."""

import os
import pty
import select
import signal
import subprocess
import time

from daemon import BINARY, gpu

STARTED = b"stallwatch started"


def clean_env(d, **extra):
    env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "JOURNAL_STREAM", "RUST_LOG")}
    env.update(STALLWATCH_FAKE_NVML=str(d.scenario_path), **extra)
    return env


def run_on_a_terminal(d, **extra):
    """stderr on a pseudo-terminal; returns what was written up to the
    start line."""
    master, slave = pty.openpty()
    p = subprocess.Popen(
        [str(BINARY), "--config", str(d.config_path)],
        stdin=subprocess.DEVNULL,
        stdout=slave,
        stderr=slave,
        env=clean_env(d, **extra),
    )
    os.close(slave)
    out = b""
    deadline = time.monotonic() + 15
    try:
        while STARTED not in out and time.monotonic() < deadline:
            if select.select([master], [], [], 0.5)[0]:
                out += os.read(master, 65536)
    finally:
        p.send_signal(signal.SIGTERM)
        p.wait(timeout=10)
        os.close(master)
    assert STARTED in out, out
    return out


def run_into_a_file(d, **extra):
    log = d.dir / "stderr.log"
    with open(log, "wb") as f:
        env = clean_env(d, **extra)
        if extra.get("JOURNAL_STREAM") == "this file":
            st = os.fstat(f.fileno())
            env["JOURNAL_STREAM"] = f"{st.st_dev}:{st.st_ino}"
        p = subprocess.Popen(
            [str(BINARY), "--config", str(d.config_path)], stdin=subprocess.DEVNULL, stdout=f, stderr=f, env=env
        )
        deadline = time.monotonic() + 15
        while STARTED not in log.read_bytes() and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(0.5)  # NVML's line comes after the start line
        p.send_signal(signal.SIGTERM)
        assert p.wait(timeout=10) == 0
    return log.read_bytes()


def test_a_terminal_gets_colours(daemon_factory):
    d = daemon_factory({"gpus": [gpu(0)]})
    assert b"\x1b[" in run_on_a_terminal(d)


def test_no_color_turns_colours_off(daemon_factory):
    d = daemon_factory({"gpus": [gpu(0)]})
    out = run_on_a_terminal(d, NO_COLOR="1")
    assert b"\x1b" not in out, out


def test_a_file_gets_plain_lines(daemon_factory):
    d = daemon_factory({"gpus": [gpu(0)]})
    out = run_into_a_file(d)
    assert b"\x1b" not in out, out
    assert not any(line.startswith(b"<") for line in out.splitlines()), out


def test_the_journal_stream_gets_a_priority_on_every_line(daemon_factory):
    d = daemon_factory({"gpus": [gpu(0)]})
    out = run_into_a_file(d, JOURNAL_STREAM="this file")
    lines = out.splitlines()
    assert lines and all(line[:3] in (b"<3>", b"<4>", b"<6>", b"<7>") for line in lines), out
    assert any(line.startswith(b"<6>") and STARTED in line for line in lines), out
    assert b"\x1b" not in out


def test_an_inherited_journal_stream_naming_another_file_adds_nothing(daemon_factory):
    d = daemon_factory({"gpus": [gpu(0)]})
    out = run_into_a_file(d, JOURNAL_STREAM="1:2")
    assert not any(line.startswith(b"<") for line in out.splitlines()), out


def test_a_config_error_under_the_journal_is_an_error(daemon_factory):
    d = daemon_factory({"gpus": [gpu(0)]})
    d.config_path.write_text('[server]\nlisten = "nowhere"\n')
    with open(d.dir / "stderr.log", "wb") as f:
        st = os.fstat(f.fileno())
        p = subprocess.run(
            [str(BINARY), "--config", str(d.config_path)],
            stderr=f,
            env=clean_env(d, JOURNAL_STREAM=f"{st.st_dev}:{st.st_ino}"),
            timeout=10,
        )
    assert p.returncode == 2
    lines = (d.dir / "stderr.log").read_bytes().splitlines()
    assert lines[0].startswith(b"<3>stallwatch: ") and str(d.config_path).encode() in lines[0], lines
    assert all(line.startswith(b"<3>") for line in lines), lines
