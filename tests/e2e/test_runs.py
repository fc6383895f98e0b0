"""Distributed runs: each job's run and rank, read from the launcher's
variables in its environment, as `stallwatch_job_rank_info` and in
/api/v1/status; bad input makes no rank, says why, and nothing else of the
environment is ever shown. Then a hung run's one notification through the real
Alertmanager, a run's ledger (its wait for a straggler, a rank's restart), and the run
rules in VictoriaMetrics (the run scenarios with real
ranks are in test_run_scenarios.py)."""

import http.server
import json
import os
import resource
import signal
import subprocess
import sys
import threading
import time
import urllib.parse

import pytest
import yaml

from daemon import ROOT, free_port, gpu, http_get, kill_group
from fleet_hosts import HANG_FAST, Hosts, fleet, prometheus_config, scaled, scaled_rules, wait_firing
from prometheus_server import PrometheusServer
from test_diagnosis import FAST
from test_jobs import SPINNER
from test_prometheus import query, wait_query

SECRET = "hunter2-do-not-show"


@pytest.fixture
def ranks():
    started = []

    def start(env):
        # A larger stack lets the environment exceed 2 MB (a quarter of it).
        def bigger_stack():
            resource.setrlimit(resource.RLIMIT_STACK, (64 << 20, 64 << 20))

        p = subprocess.Popen(["sleep", "1000"], env={"PATH": "/usr/bin:/bin", **env}, start_new_session=True,
                             preexec_fn=bigger_stack)
        started.append(p)
        return p

    yield start
    for p in started:
        kill_group(p)


def holding(*pids):
    return {"gpus": [gpu(i, utilization_gpu=90, processes=[{"pid": pid, "used_memory_bytes": 2**30}])
                     for i, pid in enumerate(pids)]}


def jobs_in_status(d):
    status = json.loads(d.get("/api/v1/status")[2])
    return {j["pid"]: j for g in status["gpus"] for j in g.get("jobs", [])}


def test_ranks_of_torchrun_and_slurm_jobs(daemon_factory, ranks):
    torchrun = ranks({"TORCHELASTIC_RUN_ID": "llm-7", "RANK": "5", "LOCAL_RANK": "1", "WORLD_SIZE": "16",
                      "GROUP_RANK": "2", "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29500"})
    slurm = ranks({"SLURM_JOB_ID": "4242", "SLURM_STEP_ID": "0", "SLURM_PROCID": "3", "SLURM_LOCALID": "0",
                   "SLURM_NTASKS": "8", "SLURM_NODEID": "3"})
    plain = ranks({"HOME": "/root"})
    d = daemon_factory(holding(torchrun.pid, slurm.pid, plain.pid)).start()
    m = d.wait_for(lambda m: m.has("stallwatch_job_rank_info", pid=str(slurm.pid)), timeout=15, what="rank info")
    assert m.has("stallwatch_job_rank_info", gpu="0", pid=str(torchrun.pid), run="torchelastic:llm-7", rank="5",
                 local_rank="1", world_size="16", launcher="torchrun")
    assert m.has("stallwatch_job_rank_info", gpu="1", pid=str(slurm.pid), run="slurm:4242.0", rank="3",
                 local_rank="0", world_size="8", launcher="slurm")
    assert not m.has("stallwatch_job_rank_info", pid=str(plain.pid))
    jobs = jobs_in_status(d)
    assert jobs[torchrun.pid]["run"] == {"run": "torchelastic:llm-7", "rank": 5, "local_rank": 1,
                                         "world_size": 16, "launcher": "torchrun"}
    assert "run" not in jobs[plain.pid] and "run_unknown" not in jobs[plain.pid]


def test_bad_launcher_variables_make_no_rank_and_say_why(daemon_factory, ranks):
    abc = ranks({"RANK": "abc", "WORLD_SIZE": "4", "MASTER_ADDR": "m", "MASTER_PORT": "1"})
    # 2.2 MB of secrets beside the launcher's variables (one variable may hold 128 KiB).
    secrets = {f"SECRET_TOKEN_{i}": SECRET * 5_000 for i in range(22)}
    big = ranks({**secrets, "RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"})
    long = ranks({"SLURM_JOB_ID": "9" * 300, "SLURM_PROCID": "0"})
    d = daemon_factory(holding(abc.pid, big.pid, long.pid)).start()
    m = d.wait_for(lambda m: m.has("stallwatch_job_rank_info", pid=str(big.pid)), timeout=15, what="rank info")
    host = open("/proc/sys/kernel/hostname").read().strip()
    assert m.has("stallwatch_job_rank_info", pid=str(big.pid), run=f"{host}/127.0.0.1:29500", rank="1")
    assert not m.has("stallwatch_job_rank_info", pid=str(abc.pid))
    assert not m.has("stallwatch_job_rank_info", pid=str(long.pid))
    jobs = jobs_in_status(d)
    assert jobs[abc.pid]["run_unknown"] == "RANK=abc is not a number"
    assert jobs[long.pid]["run_unknown"] == "SLURM_JOB_ID is longer than 256 bytes"
    # The secret beside the launcher's variables is shown nowhere.
    time.sleep(1)
    seen = "\n".join([d.get("/metrics")[2].decode(), d.get("/api/v1/status")[2].decode(),
                      d.get("/api/v1/events")[2].decode(), d.get("/")[2].decode(), d.logs()])
    assert SECRET not in seen and "SECRET_TOKEN" not in seen


# ------------------------------------------- several hosts, a real Prometheus, the rules
# (fleet_hosts.py)

class Webhook:
    """An HTTP server on loopback that keeps every notification Alertmanager posts."""

    def __init__(self):
        self.received = []
        received = self.received

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                length = int(self.headers.get("Content-Length", 0))
                received.append(json.loads(self.rfile.read(length)))
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self):
        self.server.shutdown()


def alertmanager(tmp_path, webhook_url):
    """The shipped alertmanager.yml, its receivers pointed at the webhook and its waits
    scaled like the rules, run by the real Alertmanager on loopback."""
    config = yaml.safe_load((ROOT / "deploy" / "prometheus" / "alertmanager.yml").read_text())
    for receiver in config["receivers"]:
        receiver["webhook_configs"] = [{"url": webhook_url, "send_resolved": False}]

    def scale(route):
        route.update({k: scaled(route[k]) for k in ("group_wait", "group_interval") if k in route})
        for child in route.get("routes", []):
            scale(child)

    scale(config["route"])
    config["route"].update(group_interval="1s", repeat_interval="1h")
    (tmp_path / "am").mkdir()
    path = tmp_path / "am" / "alertmanager.yml"
    path.write_text(yaml.safe_dump(config))
    port, cluster = free_port(), free_port()
    log = open(tmp_path / "am" / "log", "wb")
    p = subprocess.Popen(["prometheus-alertmanager", f"--config.file={path}", f"--storage.path={tmp_path / 'am'}",
                          f"--web.listen-address=127.0.0.1:{port}", f"--cluster.listen-address=127.0.0.1:{cluster}"],
                         stdout=log, stderr=subprocess.STDOUT)
    return p, f"http://127.0.0.1:{port}"


def test_a_hung_run_names_its_suspect_in_one_notification(daemon_factory, tmp_path):
    """Three hosts, run torchelastic:hang-1: every rank stops making output; two GPUs spin
    in the collective (busy, low power), rank 1's GPU idles. The run rules name rank 1,
    Alertmanager sends one notification for the run and mutes the waiting ranks' own
    no-progress alerts, and the fleet command says the same."""
    run = "torchelastic:hang-1"
    hosts = Hosts(daemon_factory, 3, config=HANG_FAST)
    jobs = []
    try:
        for i, d in enumerate(hosts.daemons):
            log = open(tmp_path / f"rank{i}.log", "w")
            env = {"PATH": "/usr/bin:/bin", "TORCHELASTIC_RUN_ID": "hang-1", "RANK": str(i), "LOCAL_RANK": "0",
                   "WORLD_SIZE": "3", "GROUP_RANK": str(i), "MASTER_ADDR": "10.9.9.9", "MASTER_PORT": "29500"}
            p = subprocess.Popen(["sh", "-c", "while :; do echo step; sleep 0.2; done"], env=env, stdout=log,
                                 start_new_session=True)
            jobs.append((p, log))
            busy = {"utilization_gpu": 100, "power_mw": 600000}
            d.set_scenario({"gpus": [gpu(0, **busy, processes=[{"pid": p.pid, "used_memory_bytes": 2**30}])]})
        webhook = Webhook()
        am, am_url = alertmanager(tmp_path, webhook.url)
        config = yaml.safe_load(prometheus_config(hosts.targets(), scaled_rules(tmp_path)))
        config["alerting"] = {"alertmanagers": [{"static_configs": [{"targets": [am_url.removeprefix("http://")]}]}]}
        server = PrometheusServer(tmp_path, yaml.safe_dump(config))
        try:
            time.sleep(8)  # past the jobs' warm-up, healthy and making progress
            for i, (p, _) in enumerate(jobs):
                os.kill(p.pid, signal.SIGSTOP)
                state = {"utilization_gpu": 0, "power_mw": 70000} if i == 1 else {"utilization_gpu": 100, "power_mw": 190000}
                hosts.daemons[i].set_scenario({"gpus": [gpu(0, **state, processes=[{"pid": p.pid, "used_memory_bytes": 2**30}])]})
            (a,) = wait_firing(server.url, "StallwatchRunHung", timeout=90)
            assert {k: a["labels"][k] for k in ("run", "rank", "instance")} == {"run": run, "rank": "1",
                                                                                 "instance": "127.0.0.3"}, a
            waiting = wait_firing(server.url, "StallwatchJobNoProgress", timeout=60)
            assert {x["labels"].get("run") for x in waiting} == {run}, waiting
            # Alertmanager: the waiting ranks' own alerts are muted by the run's.
            deadline = time.monotonic() + 30
            while True:
                alerts = json.loads(http_get(am_url + "/api/v2/alerts")[2])
                muted = [x for x in alerts if x["labels"]["alertname"] == "StallwatchJobNoProgress"
                         and x["labels"].get("instance") != "127.0.0.3" and x["status"]["inhibitedBy"]]
                if len(muted) >= 2 or time.monotonic() > deadline:
                    break
                time.sleep(0.5)
            assert len(muted) >= 2, alerts
            time.sleep(3)
            run_groups = [n for n in webhook.received if n["groupLabels"].get("run") == run]
            assert run_groups and all(n["groupLabels"] == {"run": run} for n in run_groups), webhook.received
            assert {x["labels"]["alertname"] for n in run_groups for x in n["alerts"]} <= {
                "StallwatchRunHung", "StallwatchRunStraggler", "StallwatchRunRanksMissing"}
            notified = [x for n in webhook.received for x in n["alerts"]]
            assert not [x for x in notified if x["labels"]["alertname"] == "StallwatchJobNoProgress"
                        and x["labels"].get("instance") != "127.0.0.3"], notified

            out = fleet(server.url, hosts.port, run, "--json")
            r = json.loads(out.stdout)["runs"][0]
            assert (out.returncode, r["state"], [s["rank"] for s in r["suspects"]]) == (1, "hung", [1]), out.stdout
            assert r["stragglers"] == []
        finally:
            server.stop()
            am.terminate()
            am.wait(timeout=20)
            webhook.stop()
    finally:
        for p, log in jobs:
            os.kill(p.pid, signal.SIGCONT)
            kill_group(p)
            log.close()



def test_a_runs_ledger_books_the_wait_for_its_straggler_and_a_restart(daemon_factory, tmp_path):
    """Three hosts, run slurm:650.0: ranks 0 and 1 make progress on busy GPUs (waiting in
    the collective), rank 2 is a real process whose one thread is pinned while its GPU
    idles (starved of input). The run's ledger books ranks 0 and 1's time to
    waiting_for_peers with rank 2's own kind, rank 2's time to its own input; then rank 0
    is killed and started again with the same environment (a new pid on the same GPU),
    and the run's ledger shows its recovery."""
    run = "slurm:650.0"
    hosts = Hosts(daemon_factory, 3, config=FAST)
    procs = []

    def rank(i, argv):
        env = dict(os.environ, SLURM_JOB_ID="650", SLURM_STEP_ID="0", SLURM_PROCID=str(i), SLURM_LOCALID="0",
                   SLURM_NTASKS="3", SLURM_NODEID=str(i))
        log = open(tmp_path / f"rank{i}.{len(procs)}.log", "w")
        p = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        procs.append((p, log))
        return p

    def hold(i, p, **state):
        processes = [{"pid": p.pid, "used_memory_bytes": 2**30}] if p else []
        hosts.daemons[i].set_scenario({"gpus": [gpu(0, **state, processes=processes)]})

    waiting = {"utilization_gpu": 100, "power_mw": 190000}
    progress = ["sh", "-c", "while :; do echo step; sleep 0.2; done"]
    server = None
    try:
        for i in (0, 1):
            hold(i, rank(i, progress), **waiting)
        hold(2, rank(2, [sys.executable, str(SPINNER)]), utilization_gpu=1, power_mw=90000)
        # The shipped rules, windows and `for:` divided by 30 like the daemons' (fleet_hosts.py).
        server = PrometheusServer(tmp_path, prometheus_config(hosts.targets(), scaled_rules(tmp_path)))
        def ledger(state):
            return f'run_state:stallwatch_gpu_time_seconds:rate5m{{run="{run}",state="{state}"}}'

        # Until rank 2's daemon names its kind (its window and enter time), the run waits
        # for a slow rank; then for the kind: starved, or what starves it (the pinned
        # thread, the host's CPU).
        input_kinds = "input_starved|single_thread_bound|cpu_saturated"
        (booked,) = wait_query(
            server.url,
            f'run_state:stallwatch_gpu_time_seconds:rate5m{{run="{run}",state="waiting_for_peers",cause=~"{input_kinds}"}} > 0',
            timeout=90)
        assert set(booked["metric"]) == {"__name__", "run", "state", "cause"}, booked
        kinds = {k["metric"]["kind"] for k in query(
            server.url, f'instance_gpu_run_rank:stallwatch_gpu_stall_active:max{{run="{run}",rank="2"}}')}
        assert booked["metric"]["cause"] in kinds, (booked, kinds)
        # Only the two waiting ranks wait; the straggler's time is its own.
        waiters = query(server.url, f'instance_gpu_run_rank_state:stallwatch_gpu_waiting_for_peers_seconds:rate5m{{run="{run}"}}')
        assert {w["metric"]["rank"] for w in waiters} == {"0", "1"}, waiters
        wait_query(server.url, f'{ledger("input")} > 0')
        # Every second once: what the run books waiting is what its waiting ranks' GPUs
        # booked, at one evaluation of the run rules (read at its time).
        (at,) = query(server.url, f'timestamp({ledger("input")})')

        def at_once(expr):
            status, _, body = http_get(server.url + "/api/v1/query?" + urllib.parse.urlencode(
                {"query": expr, "time": at["value"][1]}))
            assert status == 200, body
            return [float(x["value"][1]) for x in json.loads(body)["data"]["result"]]

        waited = at_once(f'sum({ledger("waiting_for_peers")})')
        assert waited and waited == pytest.approx(at_once(
            f'sum(instance_gpu_run_rank_state:stallwatch_gpu_waiting_for_peers_seconds:rate5m{{run="{run}"}})')), at

        # Rank 0 killed; its GPU empty for 2 s; the same rank started again on it.
        first, _ = procs[0]
        kill_group(first)
        hold(0, None, utilization_gpu=0)
        time.sleep(2)
        hold(0, rank(0, progress), **waiting)
        recovery = wait_query(server.url, f'{ledger("recovery")} > 0', timeout=60)
        assert [r["metric"].get("cause") for r in recovery] == [None], recovery
        back = wait_query(server.url, f'instance_gpu_run_rank_state:stallwatch_gpu_time_seconds:rate5m{{run="{run}",state="recovery"}} > 0')
        assert {(b["metric"]["rank"], b["metric"]["instance"]) for b in back} == {("0", "127.0.0.2")}, back
    finally:
        if server:
            server.stop()
        for p, log in procs:
            kill_group(p)
            log.close()



def start(argv, log_path):
    log = open(log_path, "wb")
    return subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT), log


def test_the_same_rules_in_victoriametrics_name_the_same_straggler(daemon_factory, ranks, tmp_path):
    """The run rules loaded into VictoriaMetrics' vmalert (Debian's victoria-metrics package),
    fed by vmagent scraping the same four hosts: the same straggler, the same run quiet."""
    run = "slurm:601.0"
    hosts = Hosts(daemon_factory, 3)
    for i, d in enumerate(hosts.daemons):
        r = ranks({"SLURM_JOB_ID": "601", "SLURM_STEP_ID": "0", "SLURM_PROCID": str(i), "SLURM_NTASKS": "3"})
        state = {"utilization_gpu": 10, "power_mw": 90000} if i == 0 else {"utilization_gpu": 100, "power_mw": 190000}
        d.set_scenario({"gpus": [gpu(0, **state, processes=[{"pid": r.pid, "used_memory_bytes": 2**30}])]})
    vm_port, agent_port, alert_port = free_port(), free_port(), free_port()
    vm_url = f"http://127.0.0.1:{vm_port}"
    scrape = yaml.safe_load(prometheus_config(hosts.targets(), []))
    scrape.pop("rule_files")
    scrape["global"].pop("evaluation_interval")
    (tmp_path / "scrape.yml").write_text(yaml.safe_dump(scrape))
    procs = []
    sink = Webhook()  # vmalert's notifier: takes the alerts and keeps them
    try:
        procs.append(start(["victoria-metrics", f"-httpListenAddr=127.0.0.1:{vm_port}", f"-storageDataPath={tmp_path / 'vm'}",
                            "-search.latencyOffset=0s", "-search.disableCache", "-retentionPeriod=1d"], tmp_path / "vm.log"))
        procs.append(start(["vmagent", f"-httpListenAddr=127.0.0.1:{agent_port}", f"-promscrape.config={tmp_path / 'scrape.yml'}",
                            f"-remoteWrite.url={vm_url}/api/v1/write", f"-remoteWrite.tmpDataPath={tmp_path / 'vmagent'}",
                            "-remoteWrite.flushInterval=500ms"], tmp_path / "vmagent.log"))
        procs.append(start(["vmalert", *[f"-rule={r}" for r in scaled_rules(tmp_path)],
                            f"-datasource.url={vm_url}", f"-remoteWrite.url={vm_url}", "-remoteWrite.flushInterval=500ms",
                            "-evaluationInterval=1s", f"-httpListenAddr=127.0.0.1:{alert_port}",
                            f"-notifier.url={sink.url.rstrip('/')}"], tmp_path / "vmalert.log"))
        deadline = time.monotonic() + 120
        found = []
        while time.monotonic() < deadline and not found:
            time.sleep(1)
            if any(p.poll() is not None for p, _ in procs):
                break
            try:
                status, _, body = http_get(f"http://127.0.0.1:{alert_port}/api/v1/alerts")
            except OSError:
                continue
            # vmalert answers `"alerts": null` while it has none.
            alerts = (json.loads(body)["data"]["alerts"] or []) if status == 200 else []
            found = [a for a in alerts if a["name"] == "StallwatchRunStraggler" and a["state"] == "firing"]
        logs = "\n".join((tmp_path / n).read_text(errors="replace")[-2000:] for n in ("vmalert.log", "vmagent.log"))
        assert found, f"vmalert named no straggler within 120 s:\n{logs}"
        assert {(a["labels"]["run"], a["labels"]["rank"], a["labels"]["instance"]) for a in found} == {(run, "0", "127.0.0.2")}
        others = [a["name"] for a in alerts if a["name"].startswith("StallwatchRun") and a["name"] != "StallwatchRunStraggler"]
        assert others == [], others
    finally:
        for p, log in procs:
            p.terminate()
            p.wait(timeout=20)
            log.close()
        sink.stop()
