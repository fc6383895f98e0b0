"""The job is untrusted: real Python processes that rewrite their own
interpreter's structures with ctypes (tests/e2e/hostile.py), read through
/api/v1/stacks/<pid> and `stallwatch stacks`. For each: the read ends within
its deadline, the daemon's peak RSS grows by less than 32 MiB, the reads'
CPU stays under one core for the request's time, /metrics answers as usual
meanwhile, the reader process runs under its limits, and the evidence says
what happened; a refused read backs the process off. And who may ask: the
stacks route answers loopback and authenticated clients only."""

import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from daemon import BINARY, gpu, kill_group

HERE = Path(__file__).parent
HOSTILE = HERE / "hostile.py"
CONFIG = '[stacks]\nmax_on_demand = "5s"\n'
SECONDS = 2
MiB = 1 << 20
# A refused read ends within the first read's time (spy_timeout, 2 s, as the
# job's spy is made then) plus the read time budget; a kept one with its burst.
DEADLINE = SECONDS + 2 + 2


@pytest.fixture
def hostile(tmp_path):
    started = []

    def start(mode, *args):
        log = tmp_path / f"{mode}.log"
        out = open(log, "w")
        p = subprocess.Popen([sys.executable, str(HOSTILE), mode, *args], stdout=out, stderr=subprocess.STDOUT,
                             start_new_session=True)
        started.append((p, out))
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            text = log.read_text()
            if "ready" in text:
                return p
            if "unsupported" in text or p.poll() is not None:
                pytest.skip(f"{mode} on Python {sys.version.split()[0]}: {text.strip()[-300:]}")
            time.sleep(0.05)
        raise AssertionError(f"{mode} never got ready: {log.read_text()[-500:]}")

    yield start
    for p, out in started:
        kill_group(p)
        out.close()


def holding(pids):
    return {"gpus": [gpu(i, utilization_gpu=95, processes=[{"pid": pid, "used_memory_bytes": 2**30}])
                     for i, pid in enumerate(pids)]}


def status_kib(pid, field):
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise KeyError(field)


def cpu_seconds(pid):
    """utime + stime + the reaped children's (the killed readers'), in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return sum(int(f) for f in fields[11:15]) / os.sysconf("SC_CLK_TCK")


def reader_of(daemon_pid):
    """The daemon's stack reader process, while one runs (a child of the
    daemon's `stacks` thread)."""
    for task in Path(f"/proc/{daemon_pid}/task").iterdir():
        for child in (task / "children").read_text().split():
            if Path(f"/proc/{child}/comm").read_text().strip() == "stallwatch-read":
                return int(child)
    return None


class Scraper:
    """Scrapes /metrics every 0.2 s while a read runs; keeps each answer's time."""

    def __init__(self, d):
        self.d, self.times, self.codes = d, [], []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run)

    def run(self):
        while not self.stop.is_set():
            t0 = time.monotonic()
            code = self.d.get("/metrics", timeout=5)[0]
            self.times.append(time.monotonic() - t0)
            self.codes.append(code)
            self.stop.wait(0.2)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join()


def read_contained(d, pid):
    """Asks for pid's stacks while scraping; checks what any read must keep
    to, and returns the report."""
    d.wait_for(lambda m: m.has("stallwatch_job_info", pid=str(pid)), timeout=20, what="the job")
    me = d.process.pid
    hwm0, cpu0 = status_kib(me, "VmHWM"), cpu_seconds(me)
    with Scraper(d) as scraper:
        t0 = time.monotonic()
        code, _, body = d.get(f"/api/v1/stacks/{pid}?seconds={SECONDS}", timeout=DEADLINE + 10)
        wall = time.monotonic() - t0
        time.sleep(0.5)
    assert code == 200, body
    report = json.loads(body)
    assert wall < DEADLINE, (wall, report)
    grown = status_kib(me, "VmHWM") - hwm0
    assert grown * 1024 < 32 * MiB, f"daemon peak RSS grew by {grown} KiB"
    spent = cpu_seconds(me) - cpu0
    assert spent < wall + 0.5, f"{spent:.2f} s of CPU in {wall:.2f} s"
    assert len(scraper.codes) >= 3 and set(scraper.codes) == {200}, scraper.codes
    assert max(scraper.times) < 1.0, scraper.times
    reader = reader_of(me)
    if reader is not None:
        limits = Path(f"/proc/{reader}/limits").read_text()
        data = next(line for line in limits.splitlines() if line.startswith("Max data size"))
        assert data.split()[3] == str(64 * MiB), data
        core = next(line for line in limits.splitlines() if line.startswith("Max core file size"))
        assert core.split()[4] == "0", core
    return report


def assert_backed_off(d, pid, report):
    """A refused read: the next request does not read the job again."""
    t0 = time.monotonic()
    code, _, body = d.get(f"/api/v1/stacks/{pid}?seconds={SECONDS}", timeout=DEADLINE + 10)
    again = json.loads(body)
    assert code == 200 and again["outcome"] == "backed_off", again
    assert time.monotonic() - t0 < 1.0
    assert "is read again in" in again["detail"] and report["summary"] in again["detail"], again


def test_an_honest_jobs_read_is_kept_whole(daemon_factory, hostile):
    job = hostile("honest")
    d = daemon_factory(holding([job.pid]), config=CONFIG).start()
    r = read_contained(d, job.pid)
    assert r["outcome"] == "sampled" and "limits" not in r, r
    assert r["samples"] >= 30
    worker = next(t for t in r["threads"] if t["top"] and t["top"][0]["function"] == "work")
    assert worker["running_share"] >= 0.5
    # The reader stays up for the next burst, under its own name.
    assert reader_of(d.process.pid) is not None


@pytest.mark.parametrize("mode,limit", [("thread_cycle", "thread_cycle"), ("frame_cycle", "frames")])
def test_a_loop_from_the_start_is_refused_and_backed_off(daemon_factory, hostile, mode, limit):
    job = hostile(mode)
    d = daemon_factory(holding([job.pid]), config=CONFIG).start()
    r = read_contained(d, job.pid)
    # py-spy looks for the interpreter by walking its threads, up to 4,096
    # entries: the reader then says the list loops, or that no interpreter
    # could be walked, or how it died on the garbage it met on the way.
    # Never a made-up stack.
    # over_budget when this burst met the budget itself; backed_off when a short read
    # (a hang's confirmation, the job's phase) met it first and the job waits its back-off.
    assert r["outcome"] in ("over_budget", "failed", "backed_off") and r["samples"] == 0, r
    assert "reader" in r["summary"] or "budget" in r["summary"], r["summary"]
    if r["outcome"] == "over_budget":
        assert r["limits"] in ([limit], ["read_time"]), r
    assert str(job.pid) in r["detail"], r
    assert_backed_off(d, job.pid, r)


@pytest.mark.parametrize("mode,limit,words", [
    ("thread_cycle", "thread_cycle", "thread list loops back on itself"),
    ("frame_cycle", "frames", "frame list loops back on itself"),
])
def test_a_loop_made_after_the_first_read_is_detected(daemon_factory, hostile, mode, limit, words):
    """The reader knows the job (its spy is made) when the list starts to
    loop: the walk stops at py-spy's limit and the loop is named."""
    job = hostile(mode, "later")
    d = daemon_factory(holding([job.pid]), config=CONFIG).start()
    assert read_contained(d, job.pid)["outcome"] == "sampled"
    os.kill(job.pid, 10)  # SIGUSR1
    time.sleep(0.5)
    r = read_contained(d, job.pid)
    assert r["outcome"] == "over_budget" and r["limits"] == [limit], r
    assert words in r["detail"] and r["samples"] == 0, r
    assert_backed_off(d, job.pid, r)


def test_a_deep_stack_of_long_names_is_cut_to_the_budgets(daemon_factory, hostile):
    job = hostile("deep_names")
    d = daemon_factory(holding([job.pid]), config=CONFIG).start()
    r = read_contained(d, job.pid)
    assert r["outcome"] == "sampled" and r["samples"] >= 10, r
    assert set(r["limits"]) >= {"frames", "name_length"}, r
    assert "the frame budget (512 frames a thread)" in r["detail"], r
    names = [p[k] for t in r["threads"] for p in t["top"] for k in ("function", "via", "user_function") if p.get(k)]
    assert names and all(len(n) <= 257 for n in names), [len(n) for n in names]
    main = next(t for t in r["threads"] if t["tid"] == job.pid)
    assert main["top"][0]["function"] == "spin_forever", main
    # A partial read is no failure: the job is read again at once.
    code, _, body = d.get(f"/api/v1/stacks/{job.pid}?seconds=0.5", timeout=DEADLINE)
    assert json.loads(body)["outcome"] == "sampled"


def test_a_deep_stack_whose_thread_list_loops_stays_within_the_readers_memory(daemon_factory, hostile):
    """The case py-spy itself took to 12.9 GB: each lap of the list copies
    the whole deep stack again."""
    job = hostile("deep_cycle")
    d = daemon_factory(holding([job.pid]), config=CONFIG).start()
    r = read_contained(d, job.pid)
    # over_budget when this burst met the budget itself; backed_off when a short read
    # (a hang's confirmation, the job's phase) met it first and the job waits its back-off.
    assert r["outcome"] in ("over_budget", "failed", "backed_off") and r["samples"] == 0, r
    assert "reader" in r["summary"] or "budget" in r["summary"], r["summary"]
    if r["outcome"] == "over_budget":
        assert r["limits"][0] in ("memory", "read_time", "thread_cycle"), r
    assert_backed_off(d, job.pid, r)
    # The reader that replaced the one stopped reads an honest job as before.
    honest = hostile("honest")
    d.set_scenario(holding([job.pid, honest.pid]))
    r = read_contained(d, honest.pid)
    assert r["outcome"] == "sampled" and r["samples"] >= 30, r


def test_names_and_line_tables_at_unmapped_or_huge_memory(daemon_factory, hostile):
    job = hostile("bad_names")
    d = daemon_factory(holding([job.pid]), config=CONFIG).start()
    r = read_contained(d, job.pid)
    # The frames whose names cannot be copied are left out; the rest shows.
    assert r["outcome"] == "sampled" and r["samples"] >= 10, r
    shown = json.dumps(r)
    assert "yyyy" not in shown and "unmapped" not in shown and "huge" not in shown
    tops = [t["top"][0]["function"] for t in r["threads"] if t["top"]]
    assert tops.count("spin_forever") == 2, r["threads"]


def test_ten_thousand_threads(daemon_factory, hostile):
    job = hostile("many_threads")
    d = daemon_factory(holding([job.pid]), config=CONFIG).start()
    r = read_contained(d, job.pid)
    # More threads than py-spy walks (4,096): refused up front, with the reason
    # (py-spy itself would scan the job's memory against its 20,000 mappings for
    # seconds first). over_budget when this burst met the limit itself; backed_off
    # when a short read (a hang's confirmation, the job's phase) met it first and
    # the job waits its back-off.
    assert r["outcome"] in ("over_budget", "backed_off") and r["samples"] == 0, r
    if r["outcome"] == "over_budget":
        assert r["limits"] == ["threads"], r
        assert "more than 4,096 threads" in r["summary"], r["summary"]
    else:
        assert "budget" in r["summary"], r["summary"]


def test_the_command_line_reader_is_contained_too(hostile):
    job = hostile("deep_cycle")
    out = subprocess.run([str(BINARY), "stacks", str(job.pid), "--duration", "2s", "--json"],
                         capture_output=True, text=True, timeout=DEADLINE + 10)
    assert out.returncode == 1, out
    r = json.loads(out.stdout)
    # over_budget when this burst met the budget itself; backed_off when a short read
    # (a hang's confirmation, the job's phase) met it first and the job waits its back-off.
    assert r["outcome"] in ("over_budget", "failed", "backed_off") and r["samples"] == 0, r
    assert "reader" in r["summary"] or "budget" in r["summary"], r["summary"]
    job = hostile("deep_names")
    out = subprocess.run([str(BINARY), "stacks", str(job.pid), "--duration", "1s", "--json"],
                         capture_output=True, text=True, timeout=DEADLINE + 10)
    assert out.returncode == 0, out
    assert "frames" in json.loads(out.stdout)["limits"]


# ----------------------------------------------------------------- who may ask

NS = f"swtest{os.getpid() % 10000}"
HOST_IP, NS_IP = "10.213.77.1", "10.213.77.2"


@pytest.fixture
def remote_client():
    """A network namespace of this test's own, joined to the host by a veth
    pair: a client that does not come from loopback."""
    if os.geteuid() != 0 or not shutil.which("ip"):
        pytest.skip("needs root and iproute2 for a network namespace")
    host_if, ns_if = f"{NS}a", f"{NS}b"

    def ip(*args):
        subprocess.run(["ip", *args], check=True, capture_output=True)

    ip("netns", "add", NS)
    try:
        ip("link", "add", host_if, "type", "veth", "peer", "name", ns_if)
        ip("link", "set", ns_if, "netns", NS)
        ip("addr", "add", f"{HOST_IP}/30", "dev", host_if)
        ip("link", "set", host_if, "up")
        ip("-n", NS, "addr", "add", f"{NS_IP}/30", "dev", ns_if)
        ip("-n", NS, "link", "set", ns_if, "up")

        def get(port, path, user=None):
            cmd = ["ip", "netns", "exec", NS, "curl", "-s", "-o", "-", "-w", "\n%{http_code}", "--max-time", "20"]
            if user:
                cmd += ["-u", user]
            out = subprocess.run([*cmd, f"http://{HOST_IP}:{port}{path}"], capture_output=True, text=True, timeout=30)
            body, _, code = out.stdout.rpartition("\n")
            return int(code), body

        yield get
    finally:
        subprocess.run(["ip", "link", "del", host_if], capture_output=True)
        subprocess.run(["ip", "netns", "del", NS], capture_output=True)


def test_stacks_are_served_to_loopback_and_authenticated_clients_only(daemon_factory, hostile, remote_client):
    from test_tls_auth import HASH, PASSWORD, USER

    job = hostile("honest")
    path = f"/api/v1/stacks/{job.pid}?seconds=0.5"
    plain = daemon_factory(holding([job.pid]), config=CONFIG)
    plain.config_path.write_text(plain.config_path.read_text().replace(f"127.0.0.1:{plain.port}", f"0.0.0.0:{plain.port}"))
    plain.start()
    plain.wait_for(lambda m: m.has("stallwatch_job_info", pid=str(job.pid)), what="the job")
    code, body = remote_client(plain.port, path)
    assert code == 403 and "loopback" in body and "stallwatch stacks PID" in body, (code, body)
    assert remote_client(plain.port, "/metrics")[0] == 200
    assert plain.get(path, timeout=15)[0] == 200
    # With basic auth, an authenticated client anywhere may ask.
    authed = daemon_factory(holding([job.pid]), config=CONFIG)
    (authed.dir / "web.yml").write_text(f"basic_auth_users:\n  {USER}: {HASH}\n")
    authed.config_path.write_text(authed.config_path.read_text().replace(
        f'listen = "127.0.0.1:{authed.port}"', f'listen = "0.0.0.0:{authed.port}"\nweb_config = "{authed.dir / "web.yml"}"'))
    authed.start(wait=False)
    deadline = time.monotonic() + 15
    while remote_client(authed.port, "/healthz", f"{USER}:{PASSWORD}")[0] != 200:
        assert time.monotonic() < deadline, authed.logs()
        time.sleep(0.2)
    while True:
        code, body = remote_client(authed.port, path, f"{USER}:{PASSWORD}")
        if code == 200 or time.monotonic() > deadline + 15:
            break
        time.sleep(0.5)  # 403 until the daemon has seen the job
    assert code == 200 and json.loads(body)["outcome"] == "sampled", (code, body[:300])
    assert remote_client(authed.port, path)[0] == 401


def test_an_automatic_read_of_a_hostile_job_is_refused_and_the_diagnosis_goes_on(daemon_factory, hostile):
    """The burst at an episode's start meets the same limits: the finding
    keeps its evidence, says why there are no stacks, and sampling goes on."""
    from test_stacks import FAST, stacks_of
    from test_diagnosis import active, wait_status

    job = hostile("deep_cycle")
    scenario = {"gpus": [gpu(0, utilization_gpu=1, processes=[{"pid": job.pid, "used_memory_bytes": 2**30}])]}
    d = daemon_factory(scenario, config=FAST).start()
    # A silent job at an idle GPU: idle_no_progress (or input_starved) reads
    # every thread.
    def with_stacks(s):
        return next((k for k, a in active(s).items() if a["evidence"].get("stacks")), None)

    s = wait_status(d, with_stacks, timeout=60, what="a finding with stacks")
    kind = with_stacks(s)
    r = stacks_of(s, kind)
    # over_budget when this burst met the budget itself; backed_off when a short read
    # (a hang's confirmation, the job's phase) met it first and the job waits its back-off.
    assert r["outcome"] in ("over_budget", "failed", "backed_off") and r["samples"] == 0, r
    assert "reader" in r["summary"] or "budget" in r["summary"], r["summary"]
    assert active(s)[kind]["hint"].endswith(f"(No Python stacks: {r['summary']}.)")
    before = d.metrics().value("stallwatch_last_sample_timestamp_seconds")
    time.sleep(1.0)
    assert d.metrics().value("stallwatch_last_sample_timestamp_seconds") > before
    assert "stall stacks: " + r["summary"] in d.logs()
