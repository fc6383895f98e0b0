"""`stallwatch fleet goodput` against a real Prometheus serving a week of a simulated
fleet's hourly series (goodput_fleet.py), backfilled with promtool: its table and its JSON
give the fleet's GPU-hours, goodput, every state, and the runs, namespaces, users and hosts
that lost the most, as the simulation booked them; runs show their waits for peers by
cause; no hourly series and an unreachable Prometheus give clear answers.

The hourly rules themselves are checked by promtool (deploy/prometheus/tests/
goodput-owners.test.yml, goodput-runs.test.yml)."""

import json
import subprocess
import time

import pytest

from daemon import BINARY, free_port, http_get, poll
from goodput_fleet import STATES, WAITING, Fleet, backfill, check
from prometheus_server import PrometheusServer

HOSTS = 20
# The series end 90 minutes ago: `--since 8d` holds all 168 hours, `--since 1h` none.
SINCE = "8d"


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("goodput")
    fleet = Fleet(HOSTS, end=int(time.time()) - 5400)
    fleet.write_openmetrics(tmp / "fleet.om")
    backfill(tmp / "fleet.om", tmp / "data")
    server = PrometheusServer(tmp, "global:\n  evaluation_interval: 1m\n")
    try:
        poll(lambda: http_get(server.url + "/-/ready")[0] == 200,
             "Prometheus did not get ready on the backfilled TSDB", 30)
    except AssertionError:
        server.stop()
        raise
    yield fleet, server.url
    server.stop()


def goodput(url, *args):
    return subprocess.run([str(BINARY), "fleet", "goodput", "--prometheus", url, *args],
                          capture_output=True, text=True, timeout=60)


def answer(url, by):
    r = goodput(url, "--by", by, "--since", SINCE, "--json", "--top", "1000")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


@pytest.mark.parametrize("by", ["namespace", "user", "instance", "run"])
def test_json_is_the_fleets_truth(served, by):
    fleet, url = served
    got = answer(url, by)
    assert got["by"] == by and got["since"] == SINCE
    # Every GPU-hour, every state (a run's waits for peers by cause), every group in order.
    assert check(got, fleet, by) == []
    assert got["states"][0]["state"] == "productive"
    assert len(got["groups"]) == got["groups_total"]
    if by == "run":
        assert any(s["state"] == WAITING and s["gpu_hours"] > 0 for s in got["states"]), "no straggler simulated"
        assert any(g.get("lost_progress_gpu_hours", 0) > 0 for g in got["groups"]), "no restart simulated"
    else:
        # Every host's 8 GPUs, every hour of the week.
        assert got["gpu_hours"] == pytest.approx(HOSTS * 8 * 168)


def test_table_names_the_teams_that_lost_most(served):
    fleet, url = served
    r = goodput(url, "--since", SINCE, "--top", "3")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    whole = fleet.truth.summary(fleet.truth.fleet("namespace"))
    assert lines[0] == (
        f"last {SINCE}: {whole['gpu_hours']:.1f} GPU-hours, goodput {whole['goodput'] * 100:.1f}% (productive), "
        f"ETTR {whole['ettr'] * 100:.1f}% (no_job left out), {whole['lost_gpu_hours']:.1f} GPU-hours lost"
    )
    assert lines[1] == "(the hourly rules have recorded 168 of the 192 hours asked for)"
    assert sum(1 for line in lines if line.split(" ")[0] in STATES) == len(STATES)
    teams = len(fleet.truth.by["namespace"])
    assert f"top 3 of {teams} namespaces by lost GPU-hours (not productive, no_job left out):" in lines
    head = lines.index(next(line for line in lines if line.startswith("NAMESPACE")))
    for line, (name, want) in zip(lines[head + 1:head + 4], fleet.truth.ranked("namespace")[:3]):
        state = want["main_lost"][0]
        assert line.split() == [
            name or "(no namespace)", f"{want['gpu_hours']:.1f}", f"{want['lost_gpu_hours']:.1f}",
            f"{fleet.truth.by['namespace'][name].get(('idle', None), 0.0) / 3600:.1f}",
            f"{want['goodput'] * 100:.1f}%", f"{want['ettr'] * 100:.1f}%", state,
            f"({fleet.truth.by['namespace'][name][(state, None)] / 3600:.1f}", "GPU-hours)",
        ]
    assert len(lines) == head + 4


def test_runs_say_whom_they_waited_for(served):
    fleet, url = served
    r = goodput(url, "--by", "run", "--since", SINCE, "--top", "1000")
    assert r.returncode == 0, r.stderr
    waited = {c for ledger in fleet.truth.by["run"].values() for s, c in ledger if s == WAITING}
    for cause in waited:
        assert f"\nwaited for peers ({cause}) " in r.stdout, r.stdout
    assert "LOST PROGRESS" in r.stdout
    for name, want in fleet.truth.ranked("run"):
        if want["main_lost"][0] == WAITING:
            (line,) = [x for x in r.stdout.splitlines() if x.startswith(name + " ")]
            assert f"waited for peers ({want['main_lost'][1]})" in line
            break
    else:
        pytest.fail("no run lost most waiting for peers in the simulation")


def test_no_hourly_series_yet_says_so(served):
    _, url = served
    r = goodput(url, "--since", "1h")
    assert r.returncode == 1
    assert url in r.stderr
    assert "no hourly series" in r.stderr and "within an hour of loading them" in r.stderr


def test_unreachable_prometheus_and_bad_flags(served):
    url = f"http://127.0.0.1:{free_port()}"
    r = goodput(url)
    assert r.returncode == 2
    assert r.stderr.startswith(f"stallwatch: cannot query {url}/api/v1/query: ")
    r = goodput("prometheus:9090")
    assert (r.returncode, r.stderr) == (2, "stallwatch: --prometheus prometheus:9090: give an http:// or https:// URL\n")
    r = goodput(served[1], "--since", "20m")
    assert r.returncode == 2 and "--since 20m" in r.stderr
