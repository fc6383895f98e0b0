"""Time per call and wait per batch, read by `stallwatch stacks` from real
Python jobs that time their own calls (calljob.py): the estimate is within
20% of the job's own median for calls of at least 5 sampling periods
(50 ms at the default 20 reads a second), shorter calls are said to be
shorter than that, and the wait per batch of a real PyTorch DataLoader and
of a real tf.data pipeline is within 25% of the loop's own."""

import importlib.util
import json
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pytest

from daemon import BINARY, kill_group
from test_diagnosis import active, wait_status
from test_stacks import FAST, holding, stacks_of

HERE = Path(__file__).parent


@pytest.fixture
def calljob(tmp_path):
    started = []

    def start(*args):
        script = tmp_path / "calljob.py"
        shutil.copy(HERE / "calljob.py", script)
        log = tmp_path / f"{'-'.join(args)}.log"
        out = open(log, "w")
        p = subprocess.Popen([sys.executable, str(script), *args], stdout=out, stderr=subprocess.STDOUT,
                             start_new_session=True, cwd=tmp_path)
        started.append((p, out))
        deadline = time.monotonic() + 60
        while "ready" not in log.read_text() and time.monotonic() < deadline:
            assert p.poll() is None, log.read_text()
            time.sleep(0.05)
        assert "ready" in log.read_text(), log.read_text()
        return p, log

    yield start
    for p, out in started:
        kill_group(p)
        out.close()


def read_stacks(pid, seconds):
    r = subprocess.run([str(BINARY), "stacks", str(pid), "--duration", f"{seconds}s", "--json"],
                       capture_output=True, text=True, timeout=seconds + 30)
    assert r.returncode == 0, r.stderr
    report = json.loads(r.stdout)
    assert report["outcome"] == "sampled", report
    text = subprocess.run([str(BINARY), "stacks", str(pid), "--duration", "2s"],
                          capture_output=True, text=True, timeout=30)
    return report, text.stdout


def own_median(log, what, name, report):
    """The job's own median over the calls that ended during the burst."""
    start, end = report["time"], report["time"] + report["duration_seconds"]
    seen = [float(p[2]) for p in (l.split() for l in log.read_text().splitlines())
            if len(p) == 4 and p[0] == what and p[1] == name and start <= float(p[3]) <= end]
    assert len(seen) >= 3, (name, seen)
    return statistics.median(seen)


def timed_spot(report, function, caller=None):
    """The per-call time of `function`'s place in its thread (under `caller`)."""
    for t in report["threads"]:
        for h in t["top"]:
            callers = [c["function"] for c in h.get("callers", [])] + [h.get("user_function")]
            if h["function"] == function and (caller is None or caller in callers):
                return h.get("per_call")
    raise AssertionError(f"no place {function} <- {caller}: {json.dumps(report['threads'], indent=1)}")


def test_each_place_says_how_long_one_call_takes(calljob):
    job, log = calljob("calls")
    report, text = read_stacks(job.pid, 8)
    period = 1 / 20
    for function, caller, name in [("burn", None, "burn"), ("fetch", None, "fetch"),
                                   ("resize", "small", "resize_small"), ("resize", "large", "resize_large")]:
        t = timed_spot(report, function, caller)
        own = own_median(log, "call", name, report)
        assert own >= 5 * period
        assert t and t.get("median_seconds"), (name, t)
        assert abs(t["median_seconds"] - own) <= 0.2 * own, (name, t, own)
        assert t["calls"] >= 3 and t["p90_seconds"] >= t["median_seconds"], (name, t)
        print(f"{name}: estimated {t['median_seconds']:.3f} s (p90 {t['p90_seconds']:.3f}, {t['calls']} calls), "
              f"own median {own:.3f} s")
    # A 5 ms call: shorter than a few sampling periods, and said so.
    t = timed_spot(report, "tiny")
    assert t and "median_seconds" not in t and t["under_seconds"] <= 0.2, t
    # The terminal says it beside the place.
    burn = next(l for l in text.splitlines()[1:] if "burn (calljob.py:" in l)
    assert "% burn (calljob.py:" in burn and ", about " in burn and " a call (median of " in burn, text


def assert_loop_waits_as_it_measured(job, log, waiting_on):
    """`stallwatch stacks` reads the loop's wait per batch within 25% of the
    loop's own median; returns what to print and the terminal's text."""
    report, text = read_stacks(job.pid, 6)
    b = report.get("batch_wait")
    assert b, json.dumps(report["threads"], indent=1)
    assert (b["function"], b["file"], b["tid"]) == ("train", "calljob.py", job.pid), b
    assert b["waiting_on"] == waiting_on, b
    own = own_median(log, "wait", "batch", report)
    assert own >= 5 / 20
    assert abs(b["per_batch"]["median_seconds"] - own) <= 0.25 * own, (b, own)
    assert "the training loop (train (calljob.py:" in text and "for each batch (median of" in text, text
    assert f"on {waiting_on}" in text, text
    return (f"estimated wait {b['per_batch']['median_seconds']:.3f} s ({b['per_batch']['calls']} batches), "
            f"own median {own:.3f} s"), text


@pytest.fixture
def torch_installed():
    assert importlib.util.find_spec("torch"), "torch is not installed: scripts/install-test-deps installs it"


@pytest.fixture
def tf_installed():
    assert importlib.util.find_spec("tensorflow"), "tensorflow is not installed: scripts/install-test-deps installs it"


# The real frameworks are part of the test set: their absence is an install error, not a skip.
needs_torch = pytest.mark.usefixtures("torch_installed")
needs_tf = pytest.mark.usefixtures("tf_installed")


@needs_torch
@pytest.mark.parametrize("workers", [0, 2])
def test_the_training_loops_wait_for_each_batch(calljob, workers):
    job, log = calljob("torch", str(workers))
    print(f"{workers} workers:", assert_loop_waits_as_it_measured(job, log, "the DataLoader's next batch")[0])


@needs_tf
def test_a_tf_data_loops_wait_for_each_batch(calljob):
    job, log = calljob("tf")
    said, text = assert_loop_waits_as_it_measured(job, log, "the tf.data iterator's next element")
    print("tf.data:", said)
    # The map's threads call `load` back to back from tf.data's runner: their calls
    # merge, and what is said of them says so rather than pass a merged run for one call.
    loads = [line for line in text.splitlines() if "at load (calljob.py:" in line and " a call" in line]
    assert loads, text
    for line in loads:
        assert "tf.data's map calls its Python function one call after another, and those merge" in line, line


@needs_torch
def test_a_starved_gpus_hint_says_how_long_the_loop_waits_for_each_batch(daemon_factory, calljob):
    # The items burn a core in the loop's own process: the GPU is starved and
    # the daemon reads the job while it is.
    job, log = calljob("torch", "0", "busy")
    d = daemon_factory(holding(job.pid, 1), config=FAST).start()
    s = wait_status(d, lambda s: stacks_of(s, "input_starved"), timeout=60, what="input_starved with stacks")
    r = stacks_of(s, "input_starved")
    b = r.get("batch_wait")
    assert b and b["function"] == "train", r
    hint = active(s)["input_starved"]["hint"]
    assert "The training loop (train (calljob.py:" in hint and " for each batch" in hint, hint
    # Its place: the DataLoader's fetch calls a batch's items one after
    # another from one line, so their calls merge, and the place says so.
    top = r["hot"][0]
    assert top["per_call"]["batch_of_items"], top
    assert "a batch's items, called one after another by the DataLoader's fetch, count as one call" in r["summary"]
