"""Every query of the Grafana dashboards and alert rules, with Grafana's
variables filled in, runs on a real Prometheus that scrapes a real stallwatch
and evaluates the rules of deploy/prometheus/stallwatch.rules.yml and
stallwatch.runs.yml.

The host has three GPUs, each held by a real process: GPU 0 starved (a job
whose one thread spins while the GPU idles), GPU 1 healthy (busy, the job
prints steadily), GPU 2 hung (idle GPU, a job that neither works nor writes).
The three jobs are ranks 0, 1 and 2 of one Slurm run (RUN), for the run
dashboard. Diagnosis windows are scaled down so all three verdicts arrive in
seconds."""

import json
import os
import pwd
import subprocess
import sys
import time
import urllib.parse

import pytest
import yaml

from daemon import Daemon, gpu, http_get
from prometheus_server import PrometheusServer
from grafana_files import (
    ALERTING, DASHBOARDS, RULES, alert_queries, grafana_variables, load_dashboard, load_yaml,
    panels, substitute, targets, variable_queries,
)
from test_jobs import SPINNER, kill_group

SCRAPE_S = 1
RANGE_S = 60
# Windows of seconds, warm-up 6 s; a silent job counts as hung after 3 s.
CONFIG = """[diagnosis]
time_scale = 0.05
hang_min = "60s"
[diagnosis.idle_no_progress]
window = "60s"
"""
RUN = "slurm:77.0"
PRINTER = "import time\nwhile True:\n    print('step', flush=True)\n    time.sleep(0.2)\n"


def held_by(index, pid, util):
    """A Hopper GPU (GPM activity below utilization.gpu, as real SMs read) held by `pid`."""
    return gpu(index, utilization_gpu=util,
               processes=[{"pid": pid, "used_memory_bytes": 8 * 2**30, "sm_util": util}],
               gpm={"sm_util": util * 0.8, "any_tensor_util": util * 0.5})


def start_prometheus(tmp, target):
    """A real Prometheus scraping the daemon every second, with the repository's
    rule files evaluated every second (their groups' own intervals replaced)."""
    assert RULES.exists(), f"{RULES} missing: the dashboards are built on its recording rules"
    groups = []
    for path in (RULES, RULES.with_name("stallwatch.runs.yml")):
        groups += yaml.safe_load(path.read_text())["groups"]
    for group in groups:
        group["interval"] = f"{SCRAPE_S}s"
    (tmp / "rules.yml").write_text(yaml.safe_dump({"groups": groups}))
    return PrometheusServer(tmp, yaml.safe_dump({
        "global": {"scrape_interval": f"{SCRAPE_S}s", "scrape_timeout": "900ms",
                   "evaluation_interval": f"{SCRAPE_S}s"},
        "rule_files": [str(tmp / "rules.yml")],
        "scrape_configs": [{"job_name": "stallwatch", "static_configs": [{"targets": [target]}]}],
    }))


class Stack:
    """The daemon, its jobs and Prometheus, ready once the diagnosis has reached
    Prometheus through the recording rules."""

    def __init__(self, tmp):
        self.tmp = tmp
        self.jobs = []
        self.daemon = None
        self.prometheus = None

    def start(self):
        starved = self.job([sys.executable, str(SPINNER)], "starved.log", rank=0)
        healthy = self.job([sys.executable, "-c", PRINTER], "healthy.log", rank=1)
        hung = self.job(["sleep", "600"], "hung.log", rank=2)
        self.pids = {"starved": starved.pid, "healthy": healthy.pid, "hung": hung.pid}
        scenario = {"gpus": [held_by(0, starved.pid, 1), held_by(1, healthy.pid, 92),
                             held_by(2, hung.pid, 0)]}
        # Fault series on every GPU: health counters, and an Xid on GPU 0.
        for g in scenario["gpus"]:
            g["health"] = {"ecc_corrected": 2, "nvlink_replay_errors": 1, "row_remap_pending": True, "recovery_action": 0}
        scenario["gpus"][0]["xids"] = [{"xid": 63, "at_ms": 2000}]
        (self.tmp / "daemon").mkdir()
        self.daemon = Daemon(self.tmp / "daemon", scenario, config=CONFIG).start()
        self.instance = f"127.0.0.1:{self.daemon.port}"
        self.prometheus = start_prometheus(self.tmp, self.instance)
        self.url = self.prometheus.url
        for expr in (
            f'instance_pid_comm:stallwatch_job_stalled_gpus:count{{pid="{starved.pid}"}}',
            'stallwatch_gpu_verdict{gpu="1", verdict="healthy"} == 1',
            'stallwatch_gpu_stall_active{gpu="2", kind="idle_no_progress"} == 1',
            'instance_kind:stallwatch_gpu_stall_seconds:rate5m{kind="input_starved"} > 0',
            'stallwatch_job_top_thread_cpu_ratio{thread="spinner"}',
            'stallwatch_gpu_xid_errors_total{gpu="0", xid="63"} == 1',
            # Both stalled jobs in a few rule evaluations, as a range query needs.
            "count(count_over_time(instance_pid_comm:stallwatch_job_stalled_gpus:count[1m]) > 3) == 2",
            f'run:stallwatch_ranks_seen:count{{run="{RUN}"}} == 3',
        ):
            self.wait(expr, timeout=60)

    def wait(self, expr, timeout):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if self.api("query", query=expr)["result"]:
                    return
            except (OSError, ValueError):
                pass  # Prometheus still starting
            time.sleep(0.5)
        raise AssertionError(f"no result for {expr} within {timeout}s")

    def job(self, argv, log_name, rank):
        out = open(self.tmp / log_name, "w")
        env = dict(os.environ, SLURM_JOB_ID="77", SLURM_STEP_ID="0", SLURM_PROCID=str(rank), SLURM_NTASKS="3")
        p = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, start_new_session=True, env=env)
        self.jobs.append((p, out))
        return p

    def stop(self):
        if self.prometheus:
            self.prometheus.stop()
        code = self.daemon.stop() if self.daemon else 0
        for p, out in self.jobs:
            kill_group(p)
            out.close()
        assert code == 0, f"daemon exited with {code} on SIGTERM"

    def api(self, path, **params):
        """Prometheus's JSON answer; a query that fails to parse or run is an error."""
        status, _, body = http_get(f"{self.url}/api/v1/{path}?{urllib.parse.urlencode(params)}", timeout=10)
        answer = json.loads(body)
        assert status == 200 and answer["status"] == "success", f"{status}: {answer.get('error')}"
        return answer["data"]

    def run(self, target, values):
        """Runs a dashboard target as Grafana does: instant or over the range."""
        expr = substitute(target["expr"], values)
        if target.get("instant"):
            return self.api("query", query=expr)["result"]
        end = time.time()
        return self.api("query_range", query=expr, start=end - RANGE_S, end=end, step=SCRAPE_S)["result"]

    def values(self, gpu_value):
        return grafana_variables(RANGE_S, SCRAPE_S, self.instance, gpu_value, RUN)


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    s = Stack(tmp_path_factory.mktemp("grafana"))
    try:
        s.start()
        yield s
    finally:
        s.stop()


# `$gpu` as Grafana writes it into a regex match: one GPU, or All (its allValue).
GPU_CHOICES = {"gpu 0": "0", "all gpus": ".*"}

# The lost time by place, which the Costliest lines table reads (through its rule): until
# the daemon under test exports this family, that table's queries must run but may be
# empty; tests/e2e/test_fleet_causes.py runs them on a Prometheus that holds such series.
PLACES = "stallwatch_gpu_lost_by_place_seconds"


def exports(stack, family):
    status, _, body = http_get(f"http://{stack.instance}/metrics", timeout=10)
    assert status == 200, status
    return f"\n{family}_total{{" in body.decode() or f"\n{family}{{" in body.decode()


@pytest.mark.parametrize("choice", GPU_CHOICES)
def test_every_dashboard_query_returns_data(stack, choice):
    values = stack.values(GPU_CHOICES[choice])
    places = exports(stack, PLACES)
    empty, failed, ran = [], [], 0
    for path in DASHBOARDS:
        for panel, target in targets(load_dashboard(path)):
            where = f"{path.name} / {panel['title']} / {target['refId']}"
            try:
                result = stack.run(target, values)
            except AssertionError as e:
                failed.append(f"{where}: {e}")
                continue
            ran += 1
            if not result and (places or PLACES not in target["expr"]):
                empty.append(where)
    assert not failed, "queries Prometheus rejects:\n" + "\n".join(failed)
    assert not empty, "queries that return no data:\n" + "\n".join(empty)
    assert ran >= 20


def test_variables_list_the_host_and_its_gpus(stack):
    values = stack.values(".*")
    found = {}
    for path in DASHBOARDS:
        for name, query in variable_queries(load_dashboard(path)):
            # label_values(selector, label), as the Prometheus data source runs it.
            selector, label = substitute(query, values)[len("label_values("):-1].rsplit(",", 1)
            found[path.stem, name] = stack.api(f"label/{label.strip()}/values", **{"match[]": selector})
    assert found == {
        ("stallwatch-gpu-hours", "instance"): [stack.instance],
        ("stallwatch-gpu-hours", "run"): [RUN],
        ("stallwatch-host", "instance"): [stack.instance],
        ("stallwatch-host", "gpu"): ["0", "1", "2"],
        ("stallwatch-run", "run"): [RUN],
    }


def panel(title, dashboard):
    d = load_dashboard(next(p for p in DASHBOARDS if p.name == dashboard))
    return next(p for p in panels(d) if p["title"] == title)


def instant(stack, title, dashboard, ref="A"):
    target = next(t for t in panel(title, dashboard)["targets"] if t["refId"] == ref)
    return stack.run({**target, "instant": True}, stack.values(".*"))


def test_fleet_dashboard_shows_the_stall(stack):
    [stalled] = instant(stack, "Stalled GPUs", "stallwatch-fleet.json")
    assert float(stalled["value"][1]) == 2  # starved and hung
    verdicts = {r["metric"]["verdict"]: float(r["value"][1])
                for r in instant(stack, "GPUs by verdict", "stallwatch-fleet.json")}
    assert verdicts == {"stalled": 2, "healthy": 1, "no_job": 0, "warming_up": 0, "unknown": 0}
    kinds = {r["metric"]["kind"] for r in instant(stack, "Stalled GPU-hours by kind", "stallwatch-fleet.json")}
    assert {"input_starved", "idle_no_progress"} <= kinds
    jobs = {r["metric"]["pid"]: r["metric"]["comm"]
            for r in instant(stack, "Top stalled jobs", "stallwatch-fleet.json", "B")}
    assert jobs == {str(stack.pids["starved"]): jobs[str(stack.pids["starved"])],
                    str(stack.pids["hung"]): "sleep"}
    assert jobs[str(stack.pids["starved"])].startswith("python")
    [host] = instant(stack, "Hosts with stalled GPUs", "stallwatch-fleet.json")
    assert host["metric"]["instance"] == stack.instance


def test_host_dashboard_names_each_gpus_verdict_and_the_pinned_thread(stack):
    p = panel("Verdict", "stallwatch-host.json")
    names = p["fieldConfig"]["defaults"]["mappings"][0]["options"]
    shown = {r["metric"]["gpu"]: names[str(int(float(r["value"][1])))]["text"]
             for r in instant(stack, "Verdict", "stallwatch-host.json")}
    assert shown == {"0": "stalled", "1": "healthy", "2": "stalled"}
    active = {(r["metric"]["gpu"], r["metric"]["kind"])
              for r in instant(stack, "Active kinds", "stallwatch-host.json")}
    assert ("0", "input_starved") in active and ("2", "idle_no_progress") in active
    assert not any(g == "1" for g, _ in active)
    threads = {(r["metric"]["pid"], r["metric"]["thread"])
               for r in instant(stack, "Busiest thread", "stallwatch-host.json")}
    assert (str(stack.pids["starved"]), "spinner") in threads


def threshold_fires(value, evaluator):
    kind, params = evaluator["type"], evaluator["params"]
    return {
        "gt": lambda: value > params[0],
        "lt": lambda: value < params[0],
        "within_range": lambda: params[0] < value < params[1],
        "outside_range": lambda: value < params[0] or value > params[1],
    }[kind]()


def firing(stack, rule):
    """The series for which the rule's condition holds now, by (instance, gpu, kind)."""
    results = {}
    for _, item in alert_queries({"groups": [{"rules": [rule]}]}):
        expr = substitute(item["model"]["expr"], stack.values(".*"))
        results[item["refId"]] = stack.api("query", query=expr)["result"]
    condition = next(i["model"] for i in rule["data"] if i["refId"] == rule["condition"])
    assert condition["type"] == "threshold"
    [check] = condition["conditions"]
    return {(r["metric"]["instance"], r["metric"]["gpu"], r["metric"]["kind"])
            for r in results[condition["expression"]]
            if threshold_fires(float(r["value"][1]), check["evaluator"])}


def test_alert_rules_fire_for_the_starved_and_the_hung_gpu_only(stack):
    rules = {r["uid"]: r for g in load_yaml(ALERTING)["groups"] for r in g["rules"]}
    every_query = [item for _, item in alert_queries(load_yaml(ALERTING))]
    assert len(every_query) == len(rules) == 2
    assert firing(stack, rules["stallwatch-gpu-input-starved"]) == {(stack.instance, "0", "input_starved")}
    assert firing(stack, rules["stallwatch-gpu-hung"]) == {(stack.instance, "2", "idle_no_progress")}


def test_run_dashboard_shows_each_rank_with_its_verdict(stack):
    seen = {r["metric"].get("__name__", ""): float(r["value"][1])
            for ref in ("A", "B") for r in instant(stack, "Ranks seen", "stallwatch-run.json", ref)}
    assert seen == {"run:stallwatch_ranks_seen:count": 3, "run:stallwatch_world_size:max": 3}
    utilization = {r["metric"]["rank"]: float(r["value"][1]) for r in instant(stack, "Ranks", "stallwatch-run.json", "A")}
    assert set(utilization) == {"0", "1", "2"} and utilization["1"] > 0.8 > utilization["0"], utilization
    p = panel("Ranks", "stallwatch-run.json")
    names = next(o for o in p["fieldConfig"]["overrides"] if o["matcher"]["options"] == "Value #D")
    names = next(x["value"][0]["options"] for x in names["properties"] if x["id"] == "mappings")
    verdicts = {r["metric"]["rank"]: names[str(int(float(r["value"][1])))]["text"]
                for r in instant(stack, "Ranks", "stallwatch-run.json", "D")}
    assert verdicts == {"0": "stalled", "1": "healthy", "2": "stalled"}
    # Nobody holds this run back: its GPUs are not busy enough for a straggler.
    roles = {r["metric"]["rank"]: float(r["value"][1]) for r in instant(stack, "Ranks", "stallwatch-run.json", "C")}
    assert roles == {"0": 0, "1": 0, "2": 0}
    [state] = instant(stack, "State", "stallwatch-run.json")
    assert float(state["value"][1]) == 0  # healthy


def by(results, label):
    return {r["metric"].get(label, ""): float(r["value"][1]) for r in results}


def test_gpu_hours_dashboard_books_the_scenario(stack):
    """One GPU trains, one waits for input, one hangs, all held by the run's ranks and
    owned by the user running the test, in no namespace. The rules are 5-minute rates of
    counters younger than that, so they read low here: the test checks the states, the
    shares and that the panels over the hosts agree, not the GPU-hours themselves."""
    # The healthy GPU trains once its job's start-up is over: wait until every rule the
    # panels read has seen it, then read every panel at one instant (the rates still grow).
    for rule in ("instance_state", "instance_namespace_user_run_state", "run_state"):
        stack.wait(f'{rule}:stallwatch_gpu_time_seconds:rate5m{{state="productive"}} > 0', timeout=30)
    time.sleep(3)
    at = time.time() - 1

    def read(title, ref="A"):
        target = next(t for t in panel(title, "stallwatch-gpu-hours.json")["targets"] if t["refId"] == ref)
        return stack.api("query", query=substitute(target["expr"], stack.values(".*")), time=at)["result"]

    watched = float(read("GPU-hours watched")[0]["value"][1])
    states = by(read("GPU-hours by state"), "state")
    assert {"productive", "input", "hung"} <= set(states), states
    assert "no_job" not in states, states  # every GPU is held
    assert sum(states.values()) == pytest.approx(watched, rel=0.01)
    goodput = float(read("Goodput")[0]["value"][1])
    ettr = float(read("Goodput of held GPUs (ETTR)")[0]["value"][1])
    assert 0 < goodput < 0.5 and ettr == pytest.approx(goodput), (goodput, ettr)
    assert goodput == pytest.approx(states["productive"] / watched, rel=0.01)
    lost = float(read("Lost GPU-hours")[0]["value"][1])
    assert lost == pytest.approx(watched - states["productive"], rel=0.01)

    # The run's own ledger: what its ranks' hosts booked, and while a straggler holds it
    # back, the waiting ranks' time as waiting_for_peers. It lost GPU-hours, most to a state
    # that is not training, which the table names with what it lost to it.
    runs = by(read("Runs that lost most", "A"), "run")
    assert set(runs) == {RUN} and runs[RUN] > 0, runs
    [main] = read("Runs that lost most", "D")
    assert main["metric"]["run"] == RUN and main["metric"]["state"] in {
        "startup", "input", "hung", "idle", "waiting_for_peers"}, main["metric"]
    assert 0 < float(main["value"][1]) <= runs[RUN]
    assert by(read("Runs that lost most", "E"), "run") == {RUN: 0}  # no restart

    # At most one GPU of the user's three trains; the owners' rule starts some seconds after
    # the hosts', so its share is not the fleet's to the digit here.
    users = by(read("Goodput by user", "C"), "user")
    assert set(users) == {pwd.getpwuid(os.getuid()).pw_name} and 0 < min(users.values()) < 0.4, users
    assert set(by(read("Goodput by namespace", "B"), "namespace")) == {"(none)"}
    [host] = read("Hosts that lost most")
    assert host["metric"]["instance"] == stack.instance
