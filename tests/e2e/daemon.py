"""Runs the real stallwatch binary against the stand-in NVML library."""

import gzip
import json
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

from prometheus_client.openmetrics.parser import text_string_to_metric_families
from standin_gpu import gpu  # noqa: F401  (the tests take it from here)

ROOT = Path(__file__).resolve().parents[2]
TARGET = Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target")) / "debug"
BINARY = TARGET / "stallwatch"
FAKE_NVML = TARGET / "libnvidia_ml.so"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def kill_group(p):
    """Kills the process and its children (they share its session)."""
    try:
        os.killpg(p.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    p.wait()


def http_get(url, headers=None, timeout=5.0):
    """Returns (status, headers, body bytes) without raising on 4xx/5xx."""
    request = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as r:
            return r.status, r.headers, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.headers, e.read()


def poll(fetch, what, timeout):
    """fetch()'s first non-empty answer, asked every 0.5 s for `timeout` s (an
    OSError answers nothing); AssertionError(what) when none came."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            found = fetch()
        except OSError:
            found = None
        if found:
            return found
        time.sleep(0.5)
    raise AssertionError(what)


def write_json_atomically(path, value):
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(value))
    os.replace(tmp, path)


class Metrics:
    """Parsed OpenMetrics exposition, with strict parsing."""

    def __init__(self, text):
        self.text = text
        self.samples = []
        for family in text_string_to_metric_families(text):
            self.samples.extend(family.samples)

    def find(self, name, **labels):
        want = {k: str(v) for k, v in labels.items()}
        return [
            s
            for s in self.samples
            if s.name == name and all(s.labels.get(k) == v for k, v in want.items())
        ]

    def value(self, name, **labels):
        found = self.find(name, **labels)
        assert len(found) == 1, f"expected one {name}{labels}, got {found}"
        return found[0].value

    def has(self, name, **labels):
        return bool(self.find(name, **labels))


class Daemon:
    def __init__(
        self,
        tmp_path,
        scenario=None,
        config="",
        library=FAKE_NVML,
        interval="250ms",
        binary=BINARY,
        prefix=(),
        server="",
        sampling="",
    ):
        """`binary` runs under `prefix` (a command such as setpriv that execs its arguments);
        `server` and `sampling` are extra TOML lines for the `[server]` and `[sampling]` tables."""
        assert BINARY.exists(), f"{BINARY} missing: run `cargo build --workspace` first"
        assert FAKE_NVML.exists(), f"{FAKE_NVML} missing: run `cargo build --workspace` first"
        self.dir = tmp_path
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.scenario_path = tmp_path / "scenario.json"
        self.config_path = tmp_path / "config.toml"
        self.log_path = tmp_path / "daemon.log"
        self.interval = interval
        # The kernel log the daemon follows: a plain file the stand-in library
        # (the scenario's "kernel_log") or the test appends driver lines to.
        self.kmsg_path = tmp_path / "kmsg"
        self.kmsg_path.touch()
        if "[faults]" not in config:
            config += f'[faults]\nkernel_log = "{self.kmsg_path}"\nevent_wait = "100ms"\n'
        if scenario is not None:
            self.set_scenario(scenario)
        self.config_path.write_text(
            f'[server]\nlisten = "127.0.0.1:{self.port}"\n{server}'
            f'[sampling]\ninterval = "{interval}"\n{sampling}'
            f'[gpu]\nnvml_library = "{library}"\ntimeout = "100ms"\ninit_retry_max = "2s"\n'
            + config
        )
        self.process = None
        self.command = [*prefix, str(binary)]

    def set_scenario(self, scenario):
        write_json_atomically(self.scenario_path, scenario)

    def kernel_log(self, *lines):
        """Appends lines (str or bytes) to the kernel log the daemon follows."""
        with open(self.kmsg_path, "ab") as f:
            for line in lines:
                f.write((line.encode() if isinstance(line, str) else line) + b"\n")

    def start(self, wait=True, args=(), log_level="info"):
        env = dict(os.environ, STALLWATCH_FAKE_NVML=str(self.scenario_path), RUST_LOG=log_level)
        self.log = open(self.log_path, "wb")
        self.process = subprocess.Popen(
            [*self.command, "--config", str(self.config_path), *args],
            env=env,
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        if wait:
            self.wait_healthy()
        return self

    def wait_healthy(self, timeout=15.0):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.process.poll() is None, f"daemon exited: {self.logs()}"
            try:
                status, _, _ = http_get(self.url + "/healthz", timeout=1)
                if status == 200:
                    return
            except OSError:
                pass
            time.sleep(0.05)
        raise AssertionError(f"daemon not healthy after {timeout}s: {self.logs()}")

    def logs(self):
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def get(self, path, headers=None, timeout=5.0):
        return http_get(self.url + path, headers, timeout)

    def metrics(self):
        status, headers, body = self.get("/metrics")
        assert status == 200, body
        assert headers["Content-Type"].startswith("application/openmetrics-text"), headers
        return Metrics(body.decode())

    def wait_for(self, predicate, timeout=10.0, what="condition"):
        """Scrapes until predicate(metrics) is true; returns those metrics."""
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            last = self.metrics()
            if predicate(last):
                return last
            time.sleep(0.1)
        raise AssertionError(f"timed out waiting for {what}; last scrape:\n{last.text if last else ''}")

    def stop(self):
        if self.process is None or self.process.poll() is not None:
            return self.process.returncode if self.process else None
        self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout=10)
        finally:
            self.log.close()

    def kill(self):
        if self.process and self.process.poll() is None:
            self.process.kill()
            self.process.wait()

    def threads(self):
        return len(os.listdir(f"/proc/{self.process.pid}/task"))


def gzip_decode(body):
    return gzip.decompress(body).decode()
