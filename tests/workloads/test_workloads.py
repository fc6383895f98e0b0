"""The simulator's behaviour emerges from real work, checked without the daemon:
what a user watching nvidia-smi and htop would notice. Stalls start at 150 s
unscaled, so the stall tests run at time scale 0.02 (onset after 3 s)."""

import glob
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from gpu_link import GpuLink  # noqa: E402
from gpu_meter import GpuMeter, GpuSpec  # noqa: E402
from orchestrator import ScenarioUnavailable, run_scenario  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
FAKE_NVML = ROOT / "target" / "debug" / "libnvidia_ml.so"
TICKS = os.sysconf("SC_CLK_TCK")


@pytest.fixture
def scenario(tmp_path):
    runs = []

    def start(name, time_scale):
        run = run_scenario(name, tmp_path / name, tmp_path / f"{name}.json", time_scale)
        runs.append(run)
        return run

    yield start
    for run in runs:
        run.stop()
        assert not run.errors, run.errors
        for job in run.jobs.values():
            assert job.popen.returncode == 0, (job.spec.name, job.stderr_path.read_text())
            assert _unexpected(job.stderr_path.read_text()) == [], job.stderr_path.read_text()
        assert not any(_alive(pid) for pid in run.pids()), "processes left behind"


def _unexpected(stderr):
    """The job's stderr lines, less TensorFlow's start-up notices: its C++
    logging prints them before it reads TF_CPP_MIN_LOG_LEVEL."""
    startup = ("WARNING: All log messages before absl::InitializeLog()", "oneDNN custom operations")
    return [line for line in stderr.splitlines() if not any(s in line for s in startup)]


def _alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _stat(path):
    with open(path) as f:
        text = f.read()
    fields = text.rsplit(")", 1)[1].split()
    return text[text.index("(") + 1:text.rindex(")")], fields


def cpu_seconds(pid):
    """utime + stime of a whole process (all its threads)."""
    _, f = _stat(f"/proc/{pid}/stat")
    return (int(f[11]) + int(f[12])) / TICKS


def thread_cpu(pid):
    """{tid: (name, cpu seconds)} for every thread of a process."""
    out = {}
    for path in glob.glob(f"/proc/{pid}/task/*/stat"):
        name, f = _stat(path)
        out[path.split("/")[4]] = (name, (int(f[11]) + int(f[12])) / TICKS)
    return out


def wchar(pid):
    with open(f"/proc/{pid}/io") as f:
        return int(next(line for line in f if line.startswith("wchar:")).split()[1])


def progress(job):
    """(stdout bytes, leader wchar) read consistently: no write in between."""
    while True:
        out, w = job.stdout_bytes(), wchar(job.pid)
        if job.stdout_bytes() == out:
            return out, w


def mean(xs):
    assert xs, "no samples"
    return sum(xs) / len(xs)


def test_link_turns_kernel_time_into_utilization(tmp_path):
    link = GpuLink.create(str(tmp_path / "link.bin"))
    meter = GpuMeter(link, [GpuSpec()])
    slot = GpuLink.attach(link.path).register(os.getpid(), 0, 3 << 30)
    meter.frame()
    for _ in range(4):  # 50% duty cycle
        slot.run_kernel(0.125)
        time.sleep(0.125)
        frame = meter.frame()[0]
    assert 0.35 < frame["utilization"] < 0.65, frame
    assert frame["nvml"]["memory_used_bytes"] == GpuSpec().base_memory_bytes + (3 << 30)
    assert frame["nvml"]["processes"][0]["pid"] == os.getpid()
    slot.release()
    assert meter.frame()[0]["nvml"]["processes"] == []


def test_healthy_steady_keeps_the_gpu_busy_without_writes_from_the_link(scenario):
    run = scenario("healthy_steady", 0.1)
    run.sleep_until(1.5)
    job = run.jobs["train"]
    out0, w0 = progress(job)
    run.sleep_until(4.0)
    assert mean(run.utilization(since=2.0)) > 0.7
    out1, w1 = progress(job)
    assert w1 - w0 == out1 - out0 > 0  # the log lines are the job's only writes
    if FAKE_NVML.exists():
        check_fake_nvml_reads(run.fake_scenario_path)


def check_fake_nvml_reads(path):
    """The written file is a valid scenario for the stand-in library."""
    code = (
        "import ctypes; lib = ctypes.CDLL(%r); assert lib.nvmlInit_v2() == 0\n"
        "n = ctypes.c_uint(); assert lib.nvmlDeviceGetCount_v2(ctypes.byref(n)) == 0; print(n.value)"
        % str(FAKE_NVML))
    env = dict(os.environ, STALLWATCH_FAKE_NVML=str(path))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=20)
    assert out.returncode == 0 and out.stdout.strip() == "1", out.stderr


def test_starved_gpu_idles_while_the_pipeline_works(scenario):
    run = scenario("input_starved", 0.02)  # onset at 3 s
    run.sleep_until(5.0)
    pid = run.jobs["train"].pid
    c0 = cpu_seconds(pid)
    run.sleep_until(8.0)
    assert mean(run.utilization(since=5.0)) < 0.1
    assert max(run.utilization(since=5.0)) < 0.05  # every sample "idle"
    assert (cpu_seconds(pid) - c0) / 3.0 > 0.05  # the job is alive and working


def test_single_thread_bound_pins_the_py_map_thread(scenario):
    run = scenario("single_thread_bound", 0.02)
    run.sleep_until(4.0)
    pid = run.jobs["train"].pid
    before = thread_cpu(pid)
    run.sleep_until(6.0)
    after = thread_cpu(pid)
    busiest = max(after, key=lambda tid: after[tid][1] - before.get(tid, (None, 0.0))[1])
    name, used = after[busiest][0], (after[busiest][1] - before[busiest][1]) / 2.0
    assert name == "py_map" and used > 0.7, (name, used)
    assert mean(run.utilization(since=5.0)) < 0.1


def test_input_bound_steady_reads_a_steady_mid_value_never_idle(scenario):
    run = scenario("input_bound_steady", 0.02)  # onset at 3 s
    run.sleep_until(8.0)
    util = run.utilization(since=5.0)  # the 1 s window has left the healthy phase
    assert 0.2 < mean(util) < 0.5, util
    assert min(util) > 0.1 and max(util) < 0.6, util  # steady: never idle, never busy


def test_gil_spread_shares_one_core_between_three_map_threads(scenario):
    run = scenario("gil_spread", 0.02)
    run.sleep_until(4.0)
    pid = run.jobs["train"].pid
    before, c0 = thread_cpu(pid), cpu_seconds(pid)
    run.sleep_until(6.0)
    after, c1 = thread_cpu(pid), cpu_seconds(pid)
    used = {after[t][0]: (after[t][1] - before.get(t, (None, 0.0))[1]) / 2.0 for t in after}
    workers = [used[f"map_worker_{i}"] for i in range(3)]
    assert all(0.15 < w < 0.6 for w in workers), used  # each about a third, none pinned
    assert sum(workers) > 0.7, used
    assert (c1 - c0) / 2.0 < 1.3, used  # the GIL: about one core for the whole process
    assert mean(run.utilization(since=5.0)) < 0.1


def test_io_bound_threads_wait_on_storage(scenario):
    try:
        run = scenario("io_bound", 0.02)
    except ScenarioUnavailable as e:
        pytest.skip(str(e))
    run.sleep_until(4.5)
    pid = run.jobs["train"].pid
    samples = []
    while run.elapsed() < 6.5:
        states = [_stat(p)[1][0] for p in glob.glob(f"/proc/{pid}/task/*/stat")]
        samples.append(states.count("D"))
        time.sleep(0.05)
    assert sum(1 for d in samples if d) / len(samples) > 0.5, samples
    assert mean(run.utilization(since=4.5)) < 0.1


def test_busy_hung_spins_at_low_power_without_output(scenario):
    run = scenario("busy_hung", 0.02)
    run.sleep_until(4.5)
    job = run.jobs["train"]
    out0, w0 = job.stdout_bytes(), wchar(job.pid)
    run.sleep_until(6.5)
    gpu = run.latest["gpus"][0]
    assert min(run.utilization(since=4.5)) > 0.99
    assert gpu["power_mw"] < 0.4 * gpu["power_limit_mw"]
    assert gpu["processes"][0]["sm_util"] >= 99
    assert job.stdout_bytes() == out0 and wchar(job.pid) == w0


def test_idle_hung_is_quiet_everywhere(scenario):
    run = scenario("idle_hung", 0.02)
    run.sleep_until(4.5)
    job = run.jobs["train"]
    out0, c0 = job.stdout_bytes(), cpu_seconds(job.pid)
    run.sleep_until(6.5)
    assert max(run.utilization(since=4.5)) == 0.0
    assert (cpu_seconds(job.pid) - c0) / 2.0 < 0.05
    assert job.stdout_bytes() == out0
    assert run.latest["gpus"][0]["processes"][0]["used_memory_bytes"] == 60 << 30


def test_leftover_child_keeps_memory_after_its_parent_exits(scenario):
    run = scenario("leftover_process", 0.02)
    parent = run.jobs["train"]
    parent.popen.wait(timeout=10)  # exits by itself at 3 s
    assert parent.popen.returncode == 0
    run.sleep_until(run.elapsed() + 0.5)
    procs = run.latest["gpus"][0]["processes"]
    assert [p["used_memory_bytes"] for p in procs] == [1 << 30], procs
    child = procs[0]["pid"]
    assert child != parent.pid and _alive(child)
    ppid = int(_stat(f"/proc/{child}/stat")[1][1])
    assert ppid != parent.pid
    assert max(run.utilization(since=run.elapsed() - 0.3)) == 0.0


def test_scenario_file_is_rewritten_atomically_as_json(scenario):
    run = scenario("no_job", 0.1)
    run.sleep_until(0.6)
    data = json.loads(run.fake_scenario_path.read_text())
    assert data["gpus"][0]["utilization_gpu"] == 0 and data["gpus"][0]["processes"] == []
    assert not list(run.fake_scenario_path.parent.glob("*.tmp"))


# -- tf.data (tf_pipeline.py; needs tensorflow-cpu and pillow, see tests/requirements-tfdata.txt).
# Importing TensorFlow takes 5-15 s, so these wait for the job's own "now the ... pipeline"
# line instead of a fixed time.

def tf_scenario(scenario, name, time_scale):
    try:
        return scenario(name, time_scale)
    except ScenarioUnavailable as e:
        pytest.skip(str(e))


def wait_for_output(job, text, timeout=90.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if text in job.stdout_path.read_text():
            return
        assert job.popen.poll() is None, job.stderr_path.read_text()
        time.sleep(0.2)
    raise AssertionError(f"no {text!r} in {job.stdout_path.read_text()!r}")


def test_tfdata_healthy_pipeline_keeps_the_gpu_busy(scenario):
    run = tf_scenario(scenario, "tfdata_healthy", 0.1)
    job = run.jobs["train"]
    wait_for_output(job, "start training")
    t = run.elapsed()
    run.sleep_until(t + 4.0)
    assert mean(run.utilization(since=t + 1.0)) > 0.7


def test_tfdata_starved_gpu_idles_while_decode_image_works(scenario):
    run = tf_scenario(scenario, "tfdata_starved", 0.05)  # onset at 7.5 s
    job = run.jobs["train"]
    wait_for_output(job, "now the starved pipeline")
    t, c0 = run.elapsed(), cpu_seconds(job.pid)
    run.sleep_until(t + 6.0)
    util = run.utilization(since=t + 1.0)
    assert mean(util) < 0.1 and max(util) < 0.05, util  # every sample "idle"
    assert (cpu_seconds(job.pid) - c0) / 6.0 > 0.2  # PIL decoding in py_function


def test_tfdata_serial_map_holds_the_gpu_at_a_steady_mid_utilization(scenario):
    run = tf_scenario(scenario, "tfdata_input_bound", 0.05)
    job = run.jobs["train"]
    wait_for_output(job, "now the serial pipeline")
    t = run.elapsed()
    run.sleep_until(t + 6.0)
    util = run.utilization(since=t + 1.0)
    assert 0.1 < mean(util) < 0.45, util  # room under input_bound.max_mean on a faster host
    assert sum(u < 0.05 for u in util) / len(util) < 0.1, util  # steady: (almost) no idle samples
