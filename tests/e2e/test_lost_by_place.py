"""Lost GPU time by the line of code that lost it, from real PyTorch jobs:
two jobs on two stand-in GPUs whose DataLoaders keep them waiting, one on a
shared helper's line (records.py), one on its own. The daemon's /metrics
counts each GPU's lost seconds under the line its stacks name, they add up
to the ledger's lost seconds, and `stallwatch status` ranks the lines with
their fix (docs/goodput.md#by-place). Then the fleet: two daemons as hosts,
each with a run of its own calling the shared helper and one with its own
slow line too, scraped by a real Prometheus with the shipped rules (windows
scaled as fleet_hosts.py does): `stallwatch fleet causes --since 10m` ranks
the shared helper first, lost in both runs on both hosts, with its call
time."""

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

import browser
from daemon import BINARY, gpu, kill_group
from fleet_hosts import Hosts, prometheus_config, scaled_rules
from prometheus_server import PrometheusServer
from test_prometheus import wait_query
from test_call_times import torch_installed  # noqa: F401 (a fixture)
from test_diagnosis import status, wait_status
from test_stacks import FAST

HERE = Path(__file__).parent
LOST = ("input", "hung", "compiling", "checkpointing")

pytestmark = pytest.mark.usefixtures("torch_installed")


@pytest.fixture
def placejob(tmp_path):
    started = []
    shared = tmp_path / "company"
    shared.mkdir()
    shutil.copy(HERE / "records.py", shared / "records.py")
    script = tmp_path / "placejob.py"
    shutil.copy(HERE / "placejob.py", script)

    def start(mode, run=None):
        log = tmp_path / f"{mode}-{run}.log"
        out = open(log, "w")
        env = {"PYTHONPATH": str(shared), "PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1"}
        if run:
            env.update(TORCHELASTIC_RUN_ID=run, RANK="0", LOCAL_RANK="0", WORLD_SIZE="1")
        p = subprocess.Popen([sys.executable, str(script), mode], stdout=out, stderr=subprocess.STDOUT,
                             start_new_session=True, cwd=tmp_path, env=env)
        started.append((p, out))
        return p, log

    yield start
    for p, out in started:
        kill_group(p)
        out.close()


def wait_ready(p, log, timeout=120):
    deadline = time.monotonic() + timeout
    while "ready" not in log.read_text() and time.monotonic() < deadline:
        assert p.poll() is None, log.read_text()
        time.sleep(0.2)
    assert "ready" in log.read_text(), log.read_text()


def placed(g):
    return {(p["place"], p["library"]): p for p in g.get("lost_by_place", [])}


def lost_seconds(g):
    return sum(g["time"].get(s, 0.0) for s in LOST)


def accounted(g):
    return (sum(p["seconds"] for p in g.get("lost_by_place", []))
            + sum(u["seconds"] for u in g.get("lost_unplaced", []))
            + g.get("lost_pending_seconds", 0.0))


def test_each_gpus_lost_time_goes_to_the_line_that_lost_it(daemon_factory, placejob):
    shared, shared_log = placejob("shared")
    own, own_log = placejob("own")
    wait_ready(shared, shared_log)
    wait_ready(own, own_log)
    # Both GPUs idle under their jobs: the DataLoaders keep them waiting.
    scenario = {"gpus": [
        gpu(i, utilization_gpu=1, processes=[{"pid": pid, "used_memory_bytes": 8 * 2**30, "sm_util": 1}])
        for i, pid in enumerate([shared.pid, own.pid])
    ]}
    d = daemon_factory(scenario, config=FAST).start()

    def both_placed(s):
        return all(placed(g) and lost_seconds(g) > 20 for g in s["gpus"])

    s = wait_status(d, both_placed, timeout=120, what="both GPUs' lost time placed")
    lines = [set(placed(g)) for g in s["gpus"]]
    shared_line = [k for k in lines[0] if k[0].startswith("load_record (records.py:")]
    assert shared_line, lines
    assert any(k[0].startswith("augment (placejob.py:") for k in lines[1]), lines
    # No path and no argument reaches a label: a function, a file's base name, a line.
    for keys in lines:
        for place, library in keys:
            assert "/" not in place and str(HERE) not in place, place

    # Every lost second is the line's, one that says why it has none, or one
    # still waiting for its stacks: within 2% per GPU.
    time.sleep(5)
    s = status(d)
    for g in s["gpus"]:
        lost = lost_seconds(g)
        assert abs(accounted(g) - lost) <= 0.02 * lost + 1.0, (lost, g["lost_by_place"], g.get("lost_unplaced"))

    m = d.metrics()
    series = m.find("stallwatch_gpu_lost_by_place_seconds_total", gpu="0", place=shared_line[0][0])
    assert series and all(x.labels["state"] == "input" for x in series), series
    assert sum(x.value for x in series) > 10, series
    # One parse takes about 0.3 s (records.py sizes it to the machine): timed from the stacks, shown beside the place.
    (call,) = m.find("stallwatch_gpu_place_call_seconds", gpu="0", place=shared_line[0][0])
    assert 0.05 < call.value < 2.0, call
    assert len(m.find("stallwatch_gpu_lost_by_place_seconds_total")) <= 32

    # The job's owner sees the same ranking, with the fix.
    r = subprocess.run([str(BINARY), "status", "--url", d.url], capture_output=True, text=True, timeout=30)
    assert "Costliest lines on this host" in r.stdout, r.stdout
    text = r.stdout[r.stdout.index("Costliest lines"):]
    assert "load_record (records.py:" in text and "augment (placejob.py:" in text, text
    assert "fix: " in text, text
    # And the status page, in a real browser: the Costliest lines table.
    dom, _, console = browser.load(d.url + "/", budget_ms=5000)
    table = dom[dom.index('id="costliest"'):]
    table = table[:table.index("</table>")]
    assert "load_record (records.py:" in table and "augment (placejob.py:" in table, table
    # Each with its kind's fix (a pinned thread's, or a starved GPU's).
    assert table.count('class="hint">this line holds one core') + table.count('class="hint">make this line') >= 2, table


def test_fleet_causes_ranks_the_shared_helper_first_over_hosts_and_runs(daemon_factory, placejob, tmp_path):
    jobs = [placejob("shared", run="alpha"), placejob("shared", run="beta"), placejob("own", run="beta")]
    for p, log in jobs:
        wait_ready(p, log)
    hosts = Hosts(daemon_factory, 2, config=FAST)
    # Host 1 (run alpha): the shared helper on GPU 0. Host 2 (run beta): the shared
    # helper on GPU 0, the job's own line on GPU 1.
    def holding(*pids):
        return {"gpus": [gpu(i, utilization_gpu=1, processes=[{"pid": pid, "used_memory_bytes": 8 * 2**30}])
                         for i, pid in enumerate(pids)]}
    hosts.daemons[0].set_scenario(holding(jobs[0][0].pid))
    hosts.daemons[1].set_scenario(holding(jobs[1][0].pid, jobs[2][0].pid))
    server = PrometheusServer(tmp_path, prometheus_config(hosts.targets(), scaled_rules(tmp_path)))
    try:
        rule = "instance_namespace_user_run_state_kind_place_library:stallwatch_gpu_lost_by_place_seconds:rate5m"
        wait_query(server.url, f'count(count by (instance) ({rule}{{place=~"load_record.*"}})) == 2', timeout=120)
        # A minute of the rules: `fleet causes` sums the 5-minute rule at 1-minute steps.
        time.sleep(65)
        r = subprocess.run([str(BINARY), "fleet", "causes", "--since", "10m", "--prometheus", server.url, "--json"],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr + r.stdout
        answer = json.loads(r.stdout)
        assert answer["rules"] == "5m", answer
        top = answer["places"][0]
        assert top["place"].startswith("load_record (records.py:"), answer["places"]
        assert top["hosts"] == 2 and top["runs"] == 2, top
        assert {t["run"] for t in top["top_runs"]} == {"torchelastic:alpha", "torchelastic:beta"}, top
        assert 0.05 < top["call_seconds"] < 2.0, top
        assert any(p["place"].startswith("augment (placejob.py:") for p in answer["places"][1:]), answer["places"]
        text = subprocess.run([str(BINARY), "fleet", "causes", "--since", "10m", "--prometheus", server.url],
                              capture_output=True, text=True, timeout=60).stdout
        assert "load_record (records.py:" in text, text
    finally:
        server.stop()
