"""Python stacks as evidence: when a GPU stalls, the daemon reads the job's
Python stacks and says in its findings, events, log and `check` where the
time goes (function, package-relative file, line); on demand through
/api/v1/stacks/<pid> and `stallwatch stacks PID`; and every case without
stacks gets a plain answer. Jobs run from a directory whose name must never
appear in anything stallwatch shows."""

import json
import re
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from daemon import BINARY, gpu, kill_group
from test_diagnosis import active, run_check, wait_status

HERE = Path(__file__).parent
SECRET = "alice-private-experiments"
# Windows of seconds, warm-up 6 s; hang time 3 s; bursts of 2 s.
FAST = '[diagnosis]\ntime_scale = 0.05\nhang_min = "1m"\n[stacks]\nduration = "2s"\nmax_on_demand = "5s"\n'


@pytest.fixture
def pyjob(tmp_path):
    started = []

    def start(mode, cwd=None):
        home = tmp_path / SECRET
        home.mkdir(exist_ok=True)
        script = home / "pyjob.py"
        shutil.copy(HERE / "pyjob.py", script)
        log = home / f"{mode}.log"
        out = open(log, "w")
        p = subprocess.Popen([sys.executable, str(script), mode], stdout=out, stderr=subprocess.STDOUT,
                             start_new_session=True, cwd=cwd or home)
        started.append((p, out))
        deadline = time.monotonic() + 10
        while "ready" not in log.read_text() and time.monotonic() < deadline:
            time.sleep(0.05)
        return p

    yield start
    for p, out in started:
        kill_group(p)
        out.close()


def holding(pid, util):
    return {"gpus": [gpu(0, utilization_gpu=util, processes=[{"pid": pid, "used_memory_bytes": 8 * 2**30, "sm_util": util}])]}


def stacks_of(s, kind):
    a = active(s).get(kind)
    return a and a["evidence"].get("stacks")


def assert_private(d, *texts):
    everything = "\n".join([d.logs(), d.get("/metrics")[2].decode(), *texts])
    assert SECRET not in everything, "a directory of the user's was shown"
    assert "/tmp/" not in "\n".join(texts)


def test_a_starved_gpu_names_the_pinned_threads_python_function(daemon_factory, pyjob):
    job = pyjob("decode")
    d = daemon_factory(holding(job.pid, 1), config=FAST).start()
    s = wait_status(d, lambda s: stacks_of(s, "input_starved"), timeout=45, what="input_starved with stacks")
    r = stacks_of(s, "input_starved")
    assert r["outcome"] == "sampled" and r["pid"] == job.pid
    assert r["python_version"].startswith("3.")
    assert r["samples"] >= 20, r
    top = r["hot"][0]
    assert (top["function"], top["file"]) == ("decode_image", "pyjob.py"), top
    assert top["line"] > 0 and top["share"] >= 0.5, top
    assert r["summary"].startswith("decode_image (pyjob.py:"), r["summary"]
    # Threads are joined to /proc: the pinned one by its kernel name and tid.
    spinner = next(t for t in r["threads"] if t["name"] == "spinner")
    assert Path(f"/proc/{job.pid}/task/{spinner['tid']}").exists()
    assert spinner["running_share"] >= 0.5
    main = next(t for t in r["threads"] if t["tid"] == job.pid)
    assert main["waiting_on"] == "queue.get", main
    # The hint leads with it; the refinement carries the same report.
    assert active(s)["input_starved"]["hint"].startswith(f"Python stacks of pid {job.pid}: decode_image (pyjob.py:")
    s = wait_status(d, lambda s: stacks_of(s, "single_thread_bound") or stacks_of(s, "cpu_saturated") is None
                    and "cpu_saturated" in active(s), what="refinement")
    if "single_thread_bound" in active(s):
        assert stacks_of(s, "single_thread_bound")["summary"] == r["summary"]
    # The start event in the ring and one log line carry it too.
    events = json.loads(d.get("/api/v1/events")[2])["events"]
    start = next(e for e in events if e["kind"] == "input_starved" and e["phase"] == "start")
    assert start["evidence"]["stacks"]["summary"] == r["summary"]
    d.wait_for(lambda m: "stall stacks: decode_image (pyjob.py:" in d.logs(), what="the stacks log line")
    line = re.sub(r"\x1b\[[0-9;]*m", "", next(l for l in d.logs().splitlines() if "stall stacks:" in l))
    assert f"event_id={start['id']}" in line and "outcome=sampled" in line, line
    # Shown on nothing but function, package-relative file and line.
    assert_private(d, json.dumps(s), json.dumps(events), d.get("/")[2].decode())


def test_gil_bound_work_spread_over_pool_threads_is_one_place(daemon_factory, pyjob):
    job = pyjob("pool")
    d = daemon_factory(holding(job.pid, 1), config=FAST).start()
    s = wait_status(d, lambda s: stacks_of(s, "input_starved"), timeout=45, what="input_starved with stacks")
    r = stacks_of(s, "input_starved")
    assert r["hot"][0]["function"] == "decode_image" and "user_function" not in r["hot"][0]
    assert r["busy_threads"] >= 2, r
    assert "spread over" in r["summary"] and "GIL-bound" in r["summary"], r["summary"]
    pool = [t for t in r["threads"] if t["top"] and t["top"][0]["function"] == "decode_image"]
    assert len(pool) == 3 and all(t["running_share"] < 0.9 for t in pool), pool


def test_a_deadlocked_job_shows_where_every_thread_waits(daemon_factory, pyjob):
    job = pyjob("deadlock")
    d = daemon_factory(holding(job.pid, 0), config=FAST).start()
    s = wait_status(d, lambda s: stacks_of(s, "idle_no_progress"), timeout=60, what="idle_no_progress with stacks")
    r = stacks_of(s, "idle_no_progress")
    assert r["outcome"] == "sampled" and r["focus"] == "all_threads"
    places = {t["tid"]: t for t in r["threads"]}
    main = places[job.pid]
    assert main["waiting_on"] == "Thread.join" and main["running_share"] == 0, main
    lockers = [t for t in r["threads"] if t["top"] and t["top"][0]["function"] == "take_both"]
    assert len(lockers) == 2, r["threads"]
    lines = {t["top"][0]["line"] for t in lockers}
    source = (HERE / "pyjob.py").read_text().splitlines()
    assert all(source[n - 1].strip() == "with b:" for n in lines), lines
    assert "take_both (pyjob.py:" in r["summary"] and "waits on Thread.join" in r["summary"]


def test_a_job_that_is_not_python_gets_a_plain_answer(daemon_factory):
    job = subprocess.Popen(["sh", "-c", "while :; do :; done"], start_new_session=True)
    try:
        d = daemon_factory(holding(job.pid, 1), config=FAST).start()
        s = wait_status(d, lambda s: stacks_of(s, "input_starved"), timeout=45, what="input_starved with stacks")
        r = stacks_of(s, "input_starved")
        assert r["outcome"] == "not_python", r
        assert r["summary"] == f"pid {job.pid} (sh) is not a Python process (no Python interpreter in its memory map)"
        assert active(s)["input_starved"]["hint"].endswith(f"(No Python stacks: {r['summary']}.)")
    finally:
        kill_group(job)


def test_on_demand_stacks_of_a_job_one_at_a_time(daemon_factory, pyjob):
    job = pyjob("decode")
    d = daemon_factory(holding(job.pid, 95), config=FAST).start()
    assert "stacks" in thread_names(d.process.pid)
    d.wait_for(lambda m: m.has("stallwatch_job_info", pid=str(job.pid)), what="the job")
    code, _, body = d.get(f"/api/v1/stacks/{job.pid}?seconds=1", timeout=15)
    assert code == 200, body
    r = json.loads(body)
    assert r["outcome"] == "sampled" and r["focus"] == "all_threads" and 15 <= r["samples"] <= 25
    assert any(t["name"] == "spinner" for t in r["threads"])
    # One burst at a time: a second request while one runs is told to wait.
    first = {}
    runner = threading.Thread(target=lambda: first.update(r=d.get(f"/api/v1/stacks/{job.pid}?seconds=3", timeout=15)))
    runner.start()
    time.sleep(0.5)
    code, headers, body = d.get(f"/api/v1/stacks/{job.pid}?seconds=1")
    runner.join()
    assert code == 429 and headers.get("retry-after") == "10", (code, body)
    assert first["r"][0] == 200
    # Only processes of GPU jobs, and bounded bursts.
    code, _, body = d.get("/api/v1/stacks/1")
    assert code == 403 and json.loads(body)["outcome"] == "not_watched"
    assert d.get(f"/api/v1/stacks/{job.pid}?seconds=60")[0] == 400
    assert d.get(f"/api/v1/stacks/{job.pid}?seconds=0")[0] == 400
    assert d.get("/api/v1/stacks/notapid")[0] == 400
    assert_private(d, body.decode())


def test_a_job_exiting_during_the_burst_keeps_what_was_read(daemon_factory, pyjob):
    job = pyjob("decode")
    d = daemon_factory(holding(job.pid, 95), config=FAST).start()
    d.wait_for(lambda m: m.has("stallwatch_job_info", pid=str(job.pid)), what="the job")
    threading.Timer(1.0, lambda: kill_group(job)).start()
    code, _, body = d.get(f"/api/v1/stacks/{job.pid}?seconds=4", timeout=15)
    assert code == 200, body
    r = json.loads(body)
    assert r["outcome"] == "sampled" and r["samples"] > 5 and r["duration_seconds"] < 3, r
    assert r["detail"].startswith(f"pid {job.pid} exited during the burst")
    # Later, the job is gone: no process, no stacks, and a plain answer.
    code, _, body = d.get(f"/api/v1/stacks/{job.pid}?seconds=1")
    assert code == 403 or json.loads(body)["outcome"] == "exited", body


def test_stacks_turned_off(daemon_factory, pyjob):
    job = pyjob("decode")
    d = daemon_factory(holding(job.pid, 1), config=FAST.replace("[stacks]\n", "[stacks]\nenabled = false\n")).start()
    s = wait_status(d, lambda s: "input_starved" in active(s), timeout=45, what="input_starved")
    time.sleep(1.0)
    assert stacks_of(wait_status(d, lambda s: True), "input_starved") is None
    assert d.get(f"/api/v1/stacks/{job.pid}")[0] == 503
    assert "stall stacks" not in d.logs()
    assert "stacks" not in thread_names(d.process.pid)


def thread_names(pid):
    return [(t / "comm").read_text().strip() for t in Path(f"/proc/{pid}/task").iterdir()]


def test_the_stacks_command(pyjob):
    job = pyjob("decode")
    r = subprocess.run([str(BINARY), "stacks", str(job.pid), "--duration", "1s"], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].startswith(f"Python stacks of pid {job.pid} (Python 3."), lines[0]
    assert any("decode_image (pyjob.py:" in l and "%" in l for l in lines[1:3]), r.stdout
    assert any(l.strip().startswith("tid ") and "(spinner, " in l for l in lines), r.stdout
    assert SECRET not in r.stdout
    r = subprocess.run([str(BINARY), "stacks", str(job.pid), "--duration", "500ms", "--json"], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0 and json.loads(r.stdout)["outcome"] == "sampled"
    sleeper = subprocess.Popen(["sleep", "30"])
    try:
        r = subprocess.run([str(BINARY), "stacks", str(sleeper.pid), "--duration", "500ms"], capture_output=True, text=True, timeout=30)
        assert r.returncode == 1 and "is not a Python process" in r.stdout, r.stdout
    finally:
        sleeper.kill()
    r = subprocess.run([str(BINARY), "stacks", str(job.pid), "--rate", "0"], capture_output=True, text=True, timeout=30)
    assert r.returncode == 2 and "--rate" in r.stderr


def test_check_reads_the_stacks_of_a_stalled_gpu(daemon_factory, pyjob):
    job = pyjob("decode")
    d = daemon_factory(holding(job.pid, 1), config='[diagnosis]\nwarmup = "1s"\n')
    time.sleep(1.2)
    r = run_check(d, "--duration", "8s")
    assert r.returncode == 1, r.stdout + r.stderr
    assert f"reading the Python stacks of pid {job.pid}" in r.stderr
    assert f"Python stacks of pid {job.pid} (Python 3." in r.stdout, r.stdout
    assert "decode_image (pyjob.py:" in r.stdout
    r = run_check(d, "--duration", "6s", "--json")
    body = json.loads(r.stdout)
    starved = next(a for a in body["status"]["gpus"][0]["active"] if a["kind"] == "input_starved")
    assert starved["evidence"]["stacks"]["hot"][0]["function"] == "decode_image"
    start = next(e for e in body["events"] if e["kind"] == "input_starved")
    assert start["evidence"]["stacks"]["outcome"] == "sampled"


def test_a_job_in_its_own_pid_namespace_is_joined_to_the_hosts_tids(daemon_factory, tmp_path):
    """A containerised job: py-spy reports the tids of the job's namespace,
    which stallwatch maps to the host's through NSpid."""
    script = tmp_path / "pyjob.py"
    shutil.copy(HERE / "pyjob.py", script)
    log = tmp_path / "ns.log"
    with open(log, "w") as out:
        outer = subprocess.Popen(["unshare", "--pid", "--fork", "--mount-proc", sys.executable, str(script), "decode"],
                                 stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 10
        while "ready" not in log.read_text() and time.monotonic() < deadline:
            time.sleep(0.05)
        if "ready" not in log.read_text():
            pytest.skip(f"cannot make a PID namespace here: {log.read_text()[:300]}")
        pid = int(Path(f"/proc/{outer.pid}/task/{outer.pid}/children").read_text().split()[0])
        nspid = [l for l in Path(f"/proc/{pid}/status").read_text().splitlines() if l.startswith("NSpid:")][0]
        assert nspid.split()[1:] == [str(pid), "1"], nspid
        d = daemon_factory(holding(pid, 95), config=FAST).start()
        d.wait_for(lambda m: m.has("stallwatch_job_info", pid=str(pid)), what="the namespaced job")
        code, _, body = d.get(f"/api/v1/stacks/{pid}?seconds=1", timeout=15)
        r = json.loads(body)
        assert code == 200 and r["outcome"] == "sampled", r
        tids = {t["tid"] for t in r["threads"]}
        assert pid in tids, f"the namespace's tid 1 is the host's {pid}: {tids}"
        assert all(Path(f"/proc/{pid}/task/{t}").exists() for t in tids), tids
        spinner = next(t for t in r["threads"] if t["name"] == "spinner")
        assert spinner["top"][0]["function"] == "decode_image"
    finally:
        kill_group(outer)
