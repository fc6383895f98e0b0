"""A real Prometheus scrapes the real daemon."""

import json
import shutil
import subprocess
import time
import urllib.parse

import pytest

from daemon import free_port, gpu, http_get


@pytest.fixture
def prometheus(tmp_path):
    binary = shutil.which("prometheus")
    assert binary, "prometheus not installed: run scripts/install-test-deps"
    procs = []

    def start(target, scrape_extra=""):
        """Scrapes target; scrape_extra adds lines to its job (indented by 4)."""
        port = free_port()
        config = tmp_path / "prometheus.yml"
        config.write_text(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 900ms\n"
            "scrape_configs:\n  - job_name: stallwatch\n"
            f"    static_configs:\n      - targets: ['{target}']\n" + scrape_extra
        )
        log = open(tmp_path / "prometheus.log", "wb")
        p = subprocess.Popen(
            [
                binary,
                f"--config.file={config}",
                f"--storage.tsdb.path={tmp_path / 'data'}",
                f"--web.listen-address=127.0.0.1:{port}",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        procs.append((p, log))
        return f"http://127.0.0.1:{port}"

    yield start
    for p, log in procs:
        p.terminate()
        p.wait(timeout=20)
        log.close()


def query(base, expr):
    status, _, body = http_get(base + "/api/v1/query?" + urllib.parse.urlencode({"query": expr}))
    if status != 200:
        return []
    return json.loads(body)["data"]["result"]


def wait_query(base, expr, timeout=30):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            result = query(base, expr)
        except OSError:
            result = []
        if result:
            return result
        time.sleep(0.5)
    raise AssertionError(f"no result for {expr} within {timeout}s")


def test_prometheus_scrapes_the_daemon(daemon_factory, prometheus):
    d = daemon_factory({"gpus": [gpu(0, utilization_gpu=87, power_mw=300000)]}).start()
    base = prometheus(f"127.0.0.1:{d.port}")
    up = wait_query(base, 'up{job="stallwatch"} == 1')
    assert up[0]["value"][1] == "1"
    util = wait_query(base, 'stallwatch_gpu_utilization_ratio{gpu="0"}')
    assert float(util[0]["value"][1]) == 0.87
    assert util[0]["metric"]["uuid"] == "GPU-00000000-0000-0000-0000-000000000000"
    watts = wait_query(base, 'stallwatch_gpu_power_watts{gpu="0"}')
    assert float(watts[0]["value"][1]) == 300
    # Counters are usable with rate() once two scrapes are in.
    rate = wait_query(base, 'irate(stallwatch_gpu_energy_joules_total{gpu="0"}[5s]) > 0')
    assert 200 < float(rate[0]["value"][1]) < 400
