"""A real Prometheus serving a backfilled TSDB on loopback, for the fleet benchmarks
(scripts/bench-fleet-goodput, scripts/bench-fleet-causes): started on a free port, waited
for until ready, its RSS; and the size of what was written."""

import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rss_mib(pid):
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def size_mib(path):
    path = Path(path)
    files = [path] if path.is_file() else [p for p in path.rglob("*") if p.is_file()]
    return sum(p.stat().st_size for p in files) / 2**20


class Served:
    """`prometheus` on the TSDB at work/data (config and log in `work`), ready when made;
    `who` names the benchmark in its messages. Stop it with stop()."""

    def __init__(self, work, who):
        config = work / "prometheus.yml"
        config.write_text("global:\n  evaluation_interval: 1m\n")
        self.url = f"http://127.0.0.1:{free_port()}"
        self.log = open(work / "prometheus.log", "wb")
        self.process = subprocess.Popen(
            [shutil.which("prometheus"), f"--config.file={config}", f"--storage.tsdb.path={work / 'data'}",
             f"--web.listen-address={self.url.removeprefix('http://')}"],
            stdout=self.log, stderr=subprocess.STDOUT)
        t = time.monotonic()
        while True:
            try:
                with urllib.request.urlopen(self.url + "/-/ready", timeout=5) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if self.process.poll() is not None or time.monotonic() - t > 300:
                self.stop()
                sys.exit(f"{who}: Prometheus did not get ready; see {work / 'prometheus.log'}")
            time.sleep(0.5)
        self.ready_s = time.monotonic() - t
        version = subprocess.run([shutil.which("prometheus"), "--version"], capture_output=True, text=True)
        self.version = version.stdout.splitlines()[0]

    def rss_mib(self):
        return rss_mib(self.process.pid)

    def stop(self):
        self.process.terminate()
        self.process.wait(timeout=60)
        self.log.close()
