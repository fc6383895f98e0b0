"""The Prometheus side: deploy/prometheus/stallwatch.rules.yml checked and unit-tested
with promtool, the example configs validated, and the rules loaded into a real Prometheus
scraping the real daemon."""

import json
import re
import shutil
import subprocess
import time
import urllib.parse
from pathlib import Path

import pytest
import yaml

from daemon import ROOT, gpu, http_get
from prometheus_server import PrometheusServer
from test_diagnosis import FAST, job  # noqa: F401 (job: the spinner fixture)
from test_prometheus import wait_query

DEPLOY = ROOT / "deploy" / "prometheus"
RULES = DEPLOY / "stallwatch.rules.yml"
RUN_RULES = DEPLOY / "stallwatch.runs.yml"
UNIT_TESTS = sorted((DEPLOY / "tests").glob("*.yml"))

# Shared with the Grafana dashboards: names and expressions must not drift.
CONTRACT = {
    "instance_verdict:stallwatch_gpu_verdict:sum": "sum by (instance, verdict) (stallwatch_gpu_verdict)",
    "instance:stallwatch_gpus_stalled:sum": 'sum by (instance) (stallwatch_gpu_verdict{verdict="stalled"})',
    "instance_kind:stallwatch_gpu_stall_seconds:rate5m": "sum by (instance, kind) (rate(stallwatch_gpu_stall_seconds_total[5m]))",
    "instance:stallwatch_gpu_job_idle_seconds:rate5m": "sum by (instance) (rate(stallwatch_gpu_job_idle_seconds_total[5m]))",
    "instance_state:stallwatch_gpu_time_seconds:rate5m": "sum by (instance, state) (rate(stallwatch_gpu_time_seconds_total[5m]))",
    "instance_pid_comm:stallwatch_job_stalled_gpus:count": (
        "count by (instance, pid, comm) (stallwatch_process_gpu_memory_bytes"
        ' and on (instance, gpu) (stallwatch_gpu_verdict{verdict="stalled"} == 1))'
    ),
}
# Alerts about the host or stallwatch itself, not about one GPU and its job.
HOST_ALERTS = {"StallwatchDown", "StallwatchTargetsAbsent", "StallwatchNVMLDown", "StallwatchNVMLStale", "StallwatchSamplesStale"}
# Alerts about a whole run, not one of its GPUs.
RUN_ALERTS = {"StallwatchRunStalled", "StallwatchRunRanksMissing"}


def promtool(*args):
    binary = shutil.which("promtool")
    assert binary, "promtool not installed: run scripts/install-test-deps"
    return subprocess.run([binary, *args], capture_output=True, text=True, timeout=120)


def groups(*paths):
    return [g for p in paths or (RULES, RUN_RULES) for g in yaml.safe_load(p.read_text())["groups"]]


def rules(*paths):
    return [r for g in groups(*paths) for r in g["rules"]]


def alerts():
    return [r for r in rules() if "alert" in r]


def squash(expr):
    return re.sub(r"\s+", " ", re.sub(r"\(\s+", "(", re.sub(r"\s+\)", ")", expr))).strip()


def kinds_in(expr):
    m = re.search(r'kind=~?"([a-z_|]+)"', expr)
    return m.group(1).split("|") if m else []


def anchors(doc):
    """GitHub's heading anchors in a Markdown file."""
    out = set()
    for line in (ROOT / doc).read_text().splitlines():
        m = re.match(r"#+ (.*)", line)
        if m:
            slug = re.sub(r"[^\w\- ]", "", m.group(1).strip().lower()).replace(" ", "-")
            out.add(slug)
    return out


def test_rules_pass_promtool_check():
    for path in (RULES, RUN_RULES):
        r = promtool("check", "rules", "--lint=all", "--lint-fatal", str(path))
        assert r.returncode == 0, r.stdout + r.stderr
        assert f"SUCCESS: {len(rules(path))} rules found" in r.stdout


def test_promtool_unit_tests_pass():
    assert len(UNIT_TESTS) >= 4
    r = promtool("test", "rules", *map(str, UNIT_TESTS))
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.count("SUCCESS") == len(UNIT_TESTS), r.stdout


def test_recording_rules_are_the_dashboards_contract():
    (shared,) = [g for g in groups() if g["name"] == "stallwatch.rules"]
    recorded = {r["record"]: squash(r["expr"]) for r in shared["rules"] if "record" in r}
    assert recorded == {name: squash(expr) for name, expr in CONTRACT.items()}


def test_every_rule_has_unit_tests_that_fire_and_stay_quiet():
    fires, quiet, exprs = set(), set(), []
    for path in UNIT_TESTS:
        for test in yaml.safe_load(path.read_text())["tests"]:
            for case in test.get("alert_rule_test", []):
                (fires if case.get("exp_alerts") else quiet).add(case["alertname"])
            exprs += [case["expr"] for case in test.get("promql_expr_test", [])]
    names = {a["alert"] for a in alerts()}
    assert names - fires == set(), "alerts never tested firing"
    assert names - quiet == set(), "alerts never tested staying quiet"
    for r in rules():
        if "record" in r:
            assert any(r["record"] in e for e in exprs), f"{r['record']} has no value test"


def test_alerts_carry_severity_gpu_job_hint_and_runbook():
    docs = {name: anchors(f"docs/{name}") for name in ("diagnosis.md", "fleet.md", "faults.md")}
    for a in alerts():
        name, ann = a["alert"], a["annotations"]
        assert a["labels"]["severity"] in ("critical", "warning", "info"), name
        assert "for" in a, f"{name}: say how long, even 0s"
        for key in ("summary", "description", "hint", "runbook_url"):
            assert ann.get(key), f"{name}: no {key}"
        if name not in HOST_ALERTS | RUN_ALERTS:
            assert "jobs" in ann and "stallwatch_process_gpu_memory_bytes" in ann["jobs"], name
            assert "{{ $labels.uuid }}" in ann["description"] or name == "StallwatchHostMemoryPressure", name
            assert ann["evidence"] == "http://{{ $labels.instance }}:9847/api/v1/status", name
        url = ann["runbook_url"]
        m = re.fullmatch(r"https://github\.com/stallwatch/stallwatch/blob/main/docs/(\w+\.md)#(.+)", url)
        assert m, f"{name}: {url}"
        targets = [m.group(2).replace("{{ $labels.kind }}", k) for k in kinds_in(a["expr"])] if "{{" in url else [m.group(2)]
        for anchor in targets:
            assert anchor in docs[m.group(1)], f"{name}: no heading for #{anchor} in docs/{m.group(1)}"
        for kind in kinds_in(a["expr"]):
            assert kind in url or "{{ $labels.kind }}" in url, f"{name}: runbook is not the {kind} section"


def test_every_stall_kind_and_finding_has_an_alert():
    alerted = {k for a in alerts() for k in kinds_in(a["expr"])}
    # Context, not a problem: TensorFlow preallocates GPU memory, and throttling is a
    # cooling matter for the host's own dashboard (docs/fleet.md#alerts).
    not_alerted = {"gpu_memory_full", "throttled"}
    kinds = set(re.findall(r"^### (\w+)", (ROOT / "docs/diagnosis.md").read_text(), re.M))
    assert kinds - not_alerted == alerted


def test_example_configs_are_valid():
    for name in ("prometheus.yml", "prometheus-federate.yml"):
        r = promtool("check", "config", str(DEPLOY / name))
        assert r.returncode == 0, r.stdout + r.stderr
        assert "WARNING" not in r.stdout + r.stderr, r.stdout + r.stderr
    r = promtool("check", "config", "--agent", str(DEPLOY / "prometheus-agent.yml"))
    assert r.returncode == 0, r.stdout + r.stderr
    # The full config loads the rules file it ships with.
    config = yaml.safe_load((DEPLOY / "prometheus.yml").read_text())
    assert config["rule_files"] == ["stallwatch.rules.yml", "stallwatch.runs.yml"]
    # The global Prometheus evaluates the run rules, once, where every cluster's ranks meet.
    federate = yaml.safe_load((DEPLOY / "prometheus-federate.yml").read_text())
    assert federate["rule_files"] == ["stallwatch.runs.yml"]
    assert [j["job_name"] for j in config["scrape_configs"]] == ["stallwatch"]


def test_remote_write_keeps_what_the_rules_read():
    agent = yaml.safe_load((DEPLOY / "prometheus-agent.yml").read_text())
    (keep,) = [c for c in agent["remote_write"][0]["write_relabel_configs"] if c["action"] == "keep"]
    kept = re.compile(keep["regex"])
    text = RULES.read_text() + RUN_RULES.read_text()
    read = set(re.findall(r"(?<![:\w])stallwatch_[a-z_]+", text)) | {"up"}
    # Only a hint names the pinned thread; without it the hint says "one thread".
    read -= {"stallwatch_job_top_thread_cpu_ratio"}
    assert {n for n in read if not kept.fullmatch(n)} == set()
    for dropped in ("stallwatch_job_threads", "stallwatch_job_top_thread_cpu_ratio",
                    "stallwatch_process_gpu_sm_utilization_ratio", "stallwatch_gpu_clock_event_active"):
        assert not kept.fullmatch(dropped), dropped


def test_federation_matches_every_recording_rule():
    config = yaml.safe_load((DEPLOY / "prometheus-federate.yml").read_text())
    (job,) = config["scrape_configs"]
    (by_name,) = [m for m in job["params"]["match[]"] if "__name__=~" in m]
    regex = re.compile(re.search(r'__name__=~"(.+?)"', by_name).group(1))
    # What the clusters record is federated; the run rules are evaluated on it globally.
    for r in rules(RULES):
        if "record" in r:
            assert regex.fullmatch(r["record"]), r["record"]
    for r in rules(RUN_RULES):
        for name in re.findall(r"\binstance_[a-z_]+:stallwatch_[a-z_:0-9]+", r["expr"]):
            assert regex.fullmatch(name) and name in {x.get("record") for x in rules()}, name
    assert not regex.fullmatch("stallwatch_gpu_verdict")


# ------------------------------------------------------- a real Prometheus, a real daemon


@pytest.fixture
def prometheus_with_rules(tmp_path):
    """A Prometheus run from the shipped prometheus.yml and rules file, scraping one target
    every second (the shipped relabeling sets instance to the host)."""
    servers = []

    def start(target):
        config = yaml.safe_load((DEPLOY / "prometheus.yml").read_text())
        config["global"].update(scrape_interval="1s", scrape_timeout="900ms", evaluation_interval="1s")
        del config["alerting"]
        config["rule_files"] = [str(RULES), str(RUN_RULES)]
        (job,) = config["scrape_configs"]
        job.pop("file_sd_configs")
        job.update(scrape_timeout="900ms", static_configs=[{"targets": [target]}])
        server = PrometheusServer(tmp_path, yaml.safe_dump(config))
        servers.append(server)
        return server.url

    yield start
    for server in servers:
        server.stop()


def active_alerts(base):
    status, _, body = http_get(base + "/api/v1/alerts")
    return json.loads(body)["data"]["alerts"] if status == 200 else []


def test_rules_on_a_real_daemon(daemon_factory, prometheus_with_rules, job):
    """A starved GPU: the alert (pending: for 5m) names the real job, the recording rules
    count it, /federate hands them on; the GPU without a job raises nothing."""
    pid = job.pid
    held = [{"pid": pid, "used_memory_bytes": 8 * 2**30, "sm_util": 1}]
    scenario = {"gpus": [gpu(0, utilization_gpu=1, processes=held), gpu(1, utilization_gpu=0)]}
    d = daemon_factory(scenario, config=FAST).start()
    base = prometheus_with_rules(f"127.0.0.1:{d.port}")
    deadline = time.monotonic() + 60
    starved = []
    while not starved and time.monotonic() < deadline:
        time.sleep(0.5)
        try:
            starved = [a for a in active_alerts(base) if a["labels"]["alertname"] == "StallwatchGPUInputStarved"]
        except OSError:
            pass
    assert starved, f"no StallwatchGPUInputStarved within 60 s; daemon log:\n{d.logs()}"
    (a,) = starved
    uuid = "GPU-00000000-0000-0000-0000-000000000000"
    comm = Path(f"/proc/{pid}/comm").read_text().strip()
    assert a["state"] == "pending"
    assert a["labels"] == {
        "alertname": "StallwatchGPUInputStarved", "instance": "127.0.0.1", "job": "stallwatch",
        "gpu": "0", "uuid": uuid, "kind": "input_starved", "severity": "warning",
    }
    assert a["annotations"]["jobs"] == f"pid {pid} ({comm}, 8GiB)"
    assert a["annotations"]["summary"] == "GPU 0 on 127.0.0.1 is starved of input"
    assert a["annotations"]["description"].startswith(f"GPU 0 ({uuid}) on 127.0.0.1 waits for data")
    assert a["annotations"]["evidence"] == "http://127.0.0.1:9847/api/v1/status"

    stalled = wait_query(base, 'instance:stallwatch_gpus_stalled:sum{instance="127.0.0.1"} == 1')
    assert stalled[0]["metric"] == {"__name__": "instance:stallwatch_gpus_stalled:sum", "instance": "127.0.0.1"}
    jobs = wait_query(base, "instance_pid_comm:stallwatch_job_stalled_gpus:count")
    assert [(r["metric"]["pid"], r["metric"]["comm"], r["value"][1]) for r in jobs] == [(str(pid), comm, "1")]
    no_job = wait_query(base, 'instance_verdict:stallwatch_gpu_verdict:sum{verdict="no_job"}')
    assert no_job[0]["value"][1] == "1"
    rate = wait_query(base, 'instance_kind:stallwatch_gpu_stall_seconds:rate5m{kind="input_starved"} > 0')
    assert 0 < float(rate[0]["value"][1]) <= 1.05
    idle = wait_query(base, "instance:stallwatch_gpu_job_idle_seconds:rate5m > 0")
    assert 0 < float(idle[0]["value"][1]) <= 1.05

    # Nothing about the GPU without a job, nor about stallwatch itself. (What the test
    # machine's own load may cause, host memory or CPU, is not asserted on.)
    raised = active_alerts(base)
    assert [x for x in raised if x["labels"].get("gpu") == "1"] == []
    wrong = HOST_ALERTS | {"StallwatchJobNoProgress", "StallwatchGPULost", "StallwatchLeftoverProcess",
                           "StallwatchSharedGPU", "StallwatchGPUInputBound"}
    assert {x["labels"]["alertname"] for x in raised} & wrong == set()

    # The global Prometheus's /federate pull hands on the recording rules and the alert.
    federate = yaml.safe_load((DEPLOY / "prometheus-federate.yml").read_text())
    params = [("match[]", m) for m in federate["scrape_configs"][0]["params"]["match[]"]]
    status, _, body = http_get(base + "/federate?" + urllib.parse.urlencode(params))
    assert status == 200
    names = {line.split("{")[0] for line in body.decode().splitlines() if line and not line.startswith("#")}
    assert set(CONTRACT) <= names, names
    assert {"ALERTS", "up"} <= names
    assert not any(n.startswith("stallwatch_") for n in names), "raw series leak into federation"


def test_alertmanager_config_names_real_alerts():
    """Every alertname matcher of alertmanager.yml selects alerts the rules define, and
    every severity it routes on is one the rules use."""
    config = yaml.safe_load((DEPLOY / "alertmanager.yml").read_text())
    names = {a["alert"] for a in alerts()}
    severities = {a["labels"]["severity"] for a in alerts()}
    matchers = [m for rule in config["inhibit_rules"] for m in rule["source_matchers"] + rule["target_matchers"]]
    matchers += [m for route in config["route"]["routes"] for m in route["matchers"]]
    for m in matchers:
        label, op, value = re.fullmatch(r'(\w+)(=~|=)"(.*)"', m).groups()
        match = (lambda n: re.fullmatch(value, n)) if op == "=~" else (lambda n: n == value)
        universe = names if label == "alertname" else severities
        assert any(match(n) for n in universe), f"{m} matches no alert"
    amtool = shutil.which("amtool")
    assert amtool, "amtool not installed: run scripts/install-test-deps"
    r = subprocess.run([amtool, "check-config", str(DEPLOY / "alertmanager.yml")], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
