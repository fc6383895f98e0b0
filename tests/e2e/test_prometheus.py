"""A real Prometheus scrapes the real daemon."""

import json
import urllib.parse

import pytest

from daemon import gpu, http_get, poll
from prometheus_server import PrometheusServer


@pytest.fixture
def prometheus(tmp_path):
    servers = []

    def start(target, scrape_extra=""):
        """Scrapes target; scrape_extra adds lines to its job (indented by 4)."""
        server = PrometheusServer(
            tmp_path,
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 900ms\n"
            "scrape_configs:\n  - job_name: stallwatch\n"
            f"    static_configs:\n      - targets: ['{target}']\n" + scrape_extra,
        )
        servers.append(server)
        return server.url

    yield start
    for server in servers:
        server.stop()


def query(base, expr):
    status, _, body = http_get(base + "/api/v1/query?" + urllib.parse.urlencode({"query": expr}))
    if status != 200:
        return []
    return json.loads(body)["data"]["result"]


def wait_query(base, expr, timeout=30):
    return poll(lambda: query(base, expr), f"no result for {expr} within {timeout}s", timeout)


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
