"""The status page at `/` as a person sees it: headless Chromium loads it from the
real daemon watching a GPU starved by a real job and a healthy one, runs its
script, and the test reads the resulting DOM and the browser's network log."""

import json
import re
import subprocess
import sys

import pytest
from bs4 import BeautifulSoup

import browser
from daemon import gpu
from test_diagnosis import FAST, active, wait_status
from test_jobs import SPINNER, kill_group


@pytest.fixture
def jobs(tmp_path):
    """A starved job (one thread spinning) and a healthy one (asleep)."""
    out = open(tmp_path / "jobs.log", "w")
    starved = subprocess.Popen([sys.executable, str(SPINNER), "--quiet"], stdout=out, start_new_session=True)
    healthy = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True)
    yield starved, healthy
    kill_group(starved)
    kill_group(healthy)
    out.close()


def scenario(starved_pid, healthy_pid):
    def holding(pid, util):
        return [{"pid": pid, "used_memory_bytes": 8 * 2**30, "sm_util": util}]

    return {
        "gpus": [
            gpu(0, utilization_gpu=1, processes=holding(starved_pid, 1)),
            gpu(1, utilization_gpu=92, processes=holding(healthy_pid, 92)),
        ]
    }


def history(d, query="minutes=15"):
    code, headers, body = d.get(f"/api/v1/history?{query}")
    assert code == 200, body
    assert headers["Content-Type"] == "application/json"
    return json.loads(body)


def text(node):
    return node.get_text(" ", strip=True) if node else ""


def chart_ys(figure):
    """The y coordinates of a chart's line (0 at the top, 56 at the bottom)."""
    ys = []
    for line in figure.select("polyline.line"):
        ys += [float(p.split(",")[1]) for p in line["points"].split()]
    return ys


def test_page_shows_the_stalled_gpu_why_and_what_to_do(daemon_factory, jobs):
    starved, healthy = jobs
    d = daemon_factory(scenario(starved.pid, healthy.pid), config=FAST + '[stacks]\nduration = "2s"\n').start()
    wait_status(
        d,
        lambda s: "input_starved" in active(s) and s["gpus"][1]["verdict"] == "healthy"
        and "stacks" in active(s)["input_starved"]["evidence"],
        what="GPU 0 starved (with the job's Python stacks) and GPU 1 healthy",
    )

    # The history the charts draw: one point a second per GPU, with the
    # utilization the scenario sets and the job's busiest thread by name.
    h = history(d)
    assert [g["gpu"] for g in h["gpus"]] == [0, 1]
    g0, g1 = h["gpus"]
    assert len(g0["t"]) >= 5 and len(g0["t"]) == len(g0["utilization"]) == len(g0["thread_cpu"]) == len(g0["thread"])
    assert all(b - a >= 0.5 for a, b in zip(g0["t"], g0["t"][1:])), g0["t"]
    assert g0["utilization"][-1] == 0.01 and g1["utilization"][-1] == 0.92
    assert "spinner" in g0["thread"], g0["thread"]
    assert h["time"] >= g0["t"][-1]

    dom, requests, console = browser.load(d.url + "/", budget_ms=5000)
    page = BeautifulSoup(dom, "html.parser")
    assert console == [], console  # no script error, nothing refused

    # Nothing fetched from anywhere but the daemon; the page did fetch its data.
    assert all(browser.origin(u) == d.url for u in requests), requests
    assert {d.url + "/", d.url + "/api/v1/status", d.url + "/api/v1/history?minutes=15"} <= set(requests), requests

    assert text(page.select_one("#summary")) == "2 GPUs: 1 stalled, 1 healthy"
    assert page.select_one("#banner").has_attr("hidden"), text(page.select_one("#banner"))
    # The daemon (root here) reads every user's jobs: nothing to say about it.
    assert page.select_one("#privileges").has_attr("hidden"), text(page.select_one("#privileges"))
    assert re.search(r"Data from \d\d:\d\d:\d\d, \d+ s old", text(page.select_one("#freshness")))
    assert page.title.string.startswith("1 stalled")

    stalled = page.select_one("article#gpu-0")
    assert stalled["data-verdict"] == "stalled"
    assert text(stalled.select_one(".verdict")) == "✖ STALLED"
    assert f"(pid {starved.pid})" in text(stalled.select_one(".job"))
    finding = stalled.select_one('li.kind.stall[data-kind="input_starved"]')
    assert finding, text(stalled)
    assert text(finding.h4).startswith("Input-starved input_starved")
    assert "prefetch" in text(finding.select_one(".hint"))
    evidence = {text(div.dt): text(div.dd) for div in finding.select(".evidence div")}
    assert evidence["utilization mean"] == "1%", evidence
    assert "spinner" in evidence["top threads"], evidence
    assert "stacks" not in evidence, "the stacks have a block of their own"
    # The job's Python stacks, once per GPU: where the spinning thread spins.
    stacks = finding.select_one("div.stacks")
    assert text(stacks.strong).startswith(f"Python stacks of pid {starved.pid} (Python 3."), text(stacks)
    places = [text(li) for li in stacks.select("li")]
    # The spinner's one call spins through the whole burst: how long a call takes is
    # said as a lower bound, never a made-up figure.
    assert re.fullmatch(r"\d+% spin \(spinner\.py:\d+\) , at least [\d.]+ m?s a call \(none seen to begin and end\)",
                        places[0]), places
    assert len(stalled.select("div.stacks")) == 1

    # Where the GPU's time went: the starved one's input time, the healthy one's work
    # (after the young job's first 10 s of it, its start-up).
    assert re.fullmatch(r"Time watched [^:]+: .*\d+% input.*", text(stalled.select_one("p.time"))), text(stalled)

    fine = page.select_one("article#gpu-1")
    assert fine["data-verdict"] == "healthy"
    assert re.fullmatch(r"Time watched [^:]+: .*\d+% productive.*", text(fine.select_one("p.time"))), text(fine)
    assert text(fine.select_one(".verdict")) == "✔ Healthy"
    assert not fine.select("li.kind.stall")

    # Charts with points, drawn where the values are: near the bottom for 1%,
    # near the top for 92%; the CPU chart names the spinning thread.
    for card in (stalled, fine):
        util, cpu = card.select_one("figure.util-chart"), card.select_one("figure.cpu-chart")
        assert int(util["data-points"]) >= 5 and len(chart_ys(util)) >= 5
        assert int(cpu["data-points"]) >= 5
    assert all(y > 50 for y in chart_ys(stalled.select_one("figure.util-chart")))
    assert all(y < 10 for y in chart_ys(fine.select_one("figure.util-chart")))
    assert "spinner" in text(stalled.select_one("figure.cpu-chart figcaption"))
    assert "1% now" in text(stalled.select_one("figure.util-chart figcaption"))

    rows = page.select("#events tbody tr")
    start = next((r for r in rows if r.get("data-kind") == "input_starved"), None)
    assert start is not None, [text(r) for r in rows]
    cells = [text(c) for c in start.select("td")]
    assert cells[1] == "0" and "started" in cells[2] and f"pid {starved.pid}" in cells[4]
    assert "prefetch" in cells[5]


def test_page_says_when_nvml_is_down_and_when_the_daemon_is_unreachable(daemon_factory, tmp_path):
    d = daemon_factory(library=tmp_path / "missing.so").start()
    dom, _, console = browser.load(d.url + "/", budget_ms=3000)
    assert console == [], console
    page = BeautifulSoup(dom, "html.parser")
    banner = page.select_one("#banner")
    assert not banner.has_attr("hidden") and "NVML is unavailable" in text(banner)
    assert text(page.select_one("#summary")) == "0 GPUs"

    # The same page with no daemon behind it (opened from a file, every fetch fails).
    code, _, html = d.get("/")
    assert code == 200
    saved = tmp_path / "status.html"
    saved.write_bytes(html)
    dom, _, _ = browser.load(saved.as_uri(), budget_ms=3000)
    banner = BeautifulSoup(dom, "html.parser").select_one("#banner")
    assert not banner.has_attr("hidden")
    assert text(banner).startswith("Cannot reach the stallwatch daemon"), text(banner)


def test_history_query_is_checked(daemon_factory):
    d = daemon_factory({"gpus": [gpu(0)]}).start()
    for bad in ("minutes=0", "minutes=16", "minutes=soon", "hours=1"):
        code, _, body = d.get(f"/api/v1/history?{bad}")
        assert code == 400, bad
        assert bad.split("=")[0].encode() in body, body
    assert [g["gpu"] for g in history(d, "minutes=1")["gpus"]] == [0]
