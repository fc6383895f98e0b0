"""`stallwatch fleet causes` against a real Prometheus holding what the shipped rules
recorded: three hosts' raw series as the daemon exports them (causes_fleet.Hosts: the lost
GPU-seconds by place and unplaced by reason, call times, the ledger and the owners' series)
over 10 hours, backfilled with promtool, and the recording rules of
deploy/prometheus/stallwatch.rules.yml evaluated over them group by group with `promtool
tsdb create-blocks-from rules` (the hourly group once an hour). The place shared by two
runs of two namespaces is ranked first with its runs, namespaces, hosts and call time;
`--by namespace` ranks each namespace's own; a 10-minute range reads the 5-minute rules; a
place's GPU-hours equal what its series counted, within 2%; the GPU-hours dashboard's
Costliest lines table reads the same. Bad flags and an empty Prometheus give clear answers.

The rules' values themselves are checked by promtool (deploy/prometheus/tests/
goodput-places.test.yml)."""

import json
import subprocess
import time
import urllib.parse

import pytest

from causes_fleet import DECODE, REDUCE, SAVE, Hosts, backfill, backfill_rules, sample_times, wait_ready
from daemon import BINARY, free_port, http_get
from grafana_files import DASHBOARDS, grafana_variables, load_dashboard, panels, substitute
from prometheus_server import PrometheusServer

# The series run 20 minutes past the fixture's start, so every range asked below ends
# inside them. The hourly rules record once an hour at a minute of their own (Prometheus
# staggers a group by its name's hash) from the start of the series: a 10-hour range holds
# 10 of their hours, the last one ending in the last hour before the series end.
AHEAD_S = 1200
LEDGER_1H = "instance:stallwatch_gpu_lost_seconds:increase1h"


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("causes")
    end = int(time.time()) // 60 * 60 + AHEAD_S
    hosts = Hosts(end)
    hosts.write_openmetrics(tmp / "hosts.om")
    backfill(tmp / "hosts.om", tmp / "data")
    (tmp / "hosts.om").unlink()
    backfill_rules(tmp, hosts.start, end)
    server = PrometheusServer(tmp, "global:\n  evaluation_interval: 1m\n")
    try:
        wait_ready(server.url)
    except AssertionError:
        server.stop()
        raise
    # When the hourly rules recorded (one host's series: every host's are recorded together).
    hosts.hourly = sample_times(server.url, LEDGER_1H + '{instance="gpu-node-a"}', "12h")
    yield hosts, server.url
    server.stop()


def causes(url, *args):
    return subprocess.run([str(BINARY), "fleet", "causes", "--prometheus", url, *args],
                          capture_output=True, text=True, timeout=60)


def answer(url, *args):
    r = causes(url, "--json", *args)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def key(place):
    return place["place"], place["library"] or ""


def recorded(hosts, since_s):
    """The hourly evaluations in the last `since_s`, and the end of the hours they hold."""
    now = time.time()
    times = [t for t in hosts.hourly if now - since_s <= t <= now]
    return len(times), max(times)


def within(got, want, rel=0.02):
    return abs(got - want) <= rel * abs(want), f"{got} where the series counted {want}"


def test_ten_minutes_read_the_five_minute_rules(served):
    hosts, url = served
    now = time.time()
    got = answer(url, "--since", "10m")
    assert got["rules"] == "5m" and "hours_recorded" not in got
    assert [key(p) for p in got["places"]] == [DECODE, REDUCE, SAVE]
    for p in got["places"]:
        ok, why = within(p["gpu_hours"], hosts.seconds(now - 600, now, key(p)) / 3600)
        assert ok, f"{p['place']}: {why}"
    ok, why = within(got["unplaced"][0]["gpu_hours"] + got["unplaced"][1]["gpu_hours"],
                     hosts.unplaced_seconds(now - 600, now) / 3600)
    assert ok, why


def test_the_shared_place_first_with_its_runs_namespaces_hosts_and_call_time(served):
    hosts, url = served
    got = answer(url, "--since", "10h")
    assert got["rules"] == "1h" and got["hours_recorded"] == recorded(hosts, 36000)[0]
    truth = hosts.places()
    assert [key(p) for p in got["places"]] == [DECODE, REDUCE, SAVE]
    for p in got["places"]:
        t = truth[key(p)]
        assert {k["kind"] for k in p["kinds"]} == t["kinds"]
        assert (p["runs"], p["namespaces"], p["hosts"]) == (len(t["runs"]), len(t["namespaces"]), len(t["hosts"]))
        assert p.get("call_seconds") == pytest.approx(t["call"]) if t["call"] else "call_seconds" not in p
    decode = got["places"][0]
    assert (decode["library"], decode["state"], decode["kind"]) == ("PIL.Image.open", "input", "input_starved")
    assert (decode["runs"], decode["namespaces"], decode["hosts"]) == (2, 2, 3)
    assert decode["call_seconds"] == pytest.approx(0.12)  # the median of the hosts' medians
    assert [r["run"] for r in decode["top_runs"]] == ["slurm:9001.0", "torchelastic:nlp-7"]
    reduce_, save = got["places"][1:]
    assert (reduce_["hosts"], reduce_["kind"], reduce_["call_seconds"]) == (1, "spinning", 2.5)
    assert save["library"] is None and save["runs"] == 0 and "call_seconds" not in save
    assert {r["reason"] for r in got["unplaced"]} == {"no_read", "no_permission"}
    # The text: the same ranking, a row a place.
    r = causes(url, "--since", "10h")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].startswith("last 10h (hourly rules): ")
    assert lines[1].startswith("unplaced: ") and "no_read" in lines[1] and "no_permission" in lines[1]
    assert lines[3] == "top 3 of 3 places by GPU-hours lost:"
    row = lines[5].split()
    assert row[2:8] == ["decode_image", "(data.py:42)", "PIL.Image.open", "input_starved", "+1", "2"]
    assert row[8:12] == ["2", "3", "120", "ms"]
    assert " slurm:9001.0 (" in lines[5] and "), torchelastic:nlp-7 (" in lines[5]


def test_a_places_gpu_hours_are_what_its_series_counted(served):
    """Over the hours the hourly rules recorded, each place's GPU-hours, the unplaced
    ones by reason and the ledger's equal the increase of the daemons' counters."""
    hosts, url = served
    got = answer(url, "--since", "10h")
    # The hours start before the series do (the range starts at most 20 minutes before
    # them, so its first evaluation's hour does), and end at its last evaluation.
    t0, t1 = hosts.start, recorded(hosts, 36000)[1]
    for p in got["places"]:
        ok, why = within(p["gpu_hours"], hosts.seconds(t0, t1, key(p)) / 3600)
        assert ok, f"{p['place']}: {why}"
        for k in p["kinds"]:
            run = {"input_starved": "slurm:9001.0", "input_bound": "torchelastic:nlp-7"}.get(k["kind"])
            if run and key(p) == DECODE:
                ok, why = within(k["gpu_hours"], hosts.seconds(t0, t1, DECODE, run=run) / 3600)
                assert ok, f"{k['kind']}: {why}"
    for r in got["unplaced"]:
        ok, why = within(r["gpu_hours"], hosts.unplaced_seconds(t0, t1, r["reason"]) / 3600)
        assert ok, f"{r['reason']}: {why}"
    lost = (hosts.seconds(t0, t1) + hosts.unplaced_seconds(t0, t1)) / 3600
    for field in ("lost_gpu_hours", "ledger_lost_gpu_hours"):
        ok, why = within(got[field], lost)
        assert ok, f"{field}: {why}"
    # And over 3 hours, from the 5-minute rules.
    now = time.time()
    got = answer(url, "--since", "3h")
    assert got["rules"] == "5m"
    for p in got["places"]:
        ok, why = within(p["gpu_hours"], hosts.seconds(now - 3 * 3600, now, key(p)) / 3600)
        assert ok, f"{p['place']} over 3h: {why}"


def test_by_namespace_ranks_each_namespaces_own(served):
    hosts, url = served
    got = answer(url, "--since", "10h", "--by", "namespace")
    assert got["by"] == "namespace" and got["groups_total"] == 2
    vision, nlp = got["groups"]
    assert vision["name"] == "team-vision" and nlp["name"] == "team-nlp"
    assert [key(p) for p in vision["places"]] == [DECODE]
    assert [key(p) for p in nlp["places"]] == [DECODE, REDUCE, SAVE]
    t0, t1 = hosts.start, recorded(hosts, 36000)[1]
    ok, why = within(nlp["places"][0]["gpu_hours"], hosts.seconds(t0, t1, DECODE, namespace="team-nlp") / 3600)
    assert ok, why
    assert nlp["places"][0]["runs"] == 1 and nlp["places"][0]["hosts"] == 3  # hosts: the fleet's
    assert [r["reason"] for r in vision["unplaced"]] == ["no_read"]
    assert [r["reason"] for r in nlp["unplaced"]] == ["no_permission"]
    r = causes(url, "--since", "10h", "--by", "namespace", "--top", "1")
    assert r.returncode == 0, r.stderr
    assert "top 1 of 2 namespaces by lost GPU-hours:" in r.stdout
    assert "\nnamespace team-vision: " in r.stdout and "team-nlp:" not in r.stdout
    runs = answer(url, "--since", "10h", "--by", "run")
    assert [g["name"] for g in runs["groups"]] == ["slurm:9001.0", "torchelastic:nlp-7", None]


def test_costliest_lines_table_reads_the_same(served):
    """The GPU-hours dashboard's table, its queries as Grafana sends them over the last
    8 hours: each place's GPU-hours, runs, namespaces and the run that lost most there."""
    hosts, url = served
    dashboard = load_dashboard(next(p for p in DASHBOARDS if p.name == "stallwatch-gpu-hours.json"))
    table = next(p for p in panels(dashboard) if p["title"] == "Costliest lines")
    values = grafana_variables(8 * 3600, 60, ".*", ".*", ".*")
    now = time.time()

    def read(ref):
        target = next(t for t in table["targets"] if t["refId"] == ref)
        query = urllib.parse.urlencode({"query": substitute(target["expr"], values), "time": now})
        status, _, body = http_get(f"{url}/api/v1/query?{query}", timeout=30)
        assert status == 200, body
        return {(r["metric"]["place"], r["metric"]["library"], r["metric"]["kind"]): r
                for r in json.loads(body)["data"]["result"]}

    hours, runs, namespaces, top = read("A"), read("B"), read("C"), read("D")
    decode = (DECODE[0], DECODE[1], "input_starved")
    assert set(hours) == {decode, (DECODE[0], DECODE[1], "input_bound"), (REDUCE[0], REDUCE[1], "spinning"),
                          (SAVE[0], "(own code)", "checkpointing")}
    ok, why = within(float(hours[decode]["value"][1]),
                     hosts.seconds(now - 8 * 3600, now, DECODE, run="slurm:9001.0") / 3600)
    assert ok, why
    assert float(runs[decode]["value"][1]) == 1 and float(namespaces[decode]["value"][1]) == 1
    assert top[decode]["metric"]["run"] == "slurm:9001.0"
    assert (SAVE[0], "(own code)", "checkpointing") not in runs  # a notebook: no run


def test_bad_flags_and_an_empty_prometheus(served, tmp_path):
    hosts, url = served
    r = causes(url, "--since", "5m")
    assert r.returncode == 2 and r.stderr.startswith("stallwatch: --since 5m: give 10m or more"), r.stderr
    r = causes(url, "--by", "team")
    assert r.returncode == 2 and "'team'" in r.stderr and "--by" in r.stderr, r.stderr
    r = causes(url, "--top", "0")
    assert r.returncode == 2 and "--top" in r.stderr, r.stderr
    r = causes("prometheus:9090")
    assert (r.returncode, r.stderr) == (2, "stallwatch: --prometheus prometheus:9090: give an http:// or https:// URL\n")
    dead = f"http://127.0.0.1:{free_port()}"
    r = causes(dead)
    assert r.returncode == 2 and r.stderr.startswith(f"stallwatch: cannot query {dead}/api/v1/query: ")
    # A range longer than what the hourly rules recorded says so.
    r = causes(url, "--since", "2d")
    assert r.returncode == 0, r.stderr
    hours = recorded(hosts, 2 * 86400)[0]
    assert r.stdout.splitlines()[1] == f"(the hourly rules have recorded {hours} of the 48 hours asked for)"
    empty = PrometheusServer(tmp_path, "global:\n  evaluation_interval: 1m\n")
    try:
        wait_ready(empty.url)
        r = causes(empty.url, "--since", "7d")
        assert r.returncode == 1 and "no hourly series of" in r.stderr and empty.url in r.stderr, r.stderr
        assert "within an hour of loading them" in r.stderr
        r = causes(empty.url, "--since", "10m")
        assert r.returncode == 1 and "stallwatch.causes" in r.stderr, r.stderr
    finally:
        empty.stop()
