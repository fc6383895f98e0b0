"""The scenario suite: the real daemon watches each labelled scenario of the
training simulator (tests/workloads) and must report exactly what the labels
say, within each kind's bound, once per labelled episode.

All times are scaled by SCALE (the daemon's `diagnosis.time_scale` and the
scenario's phase times alike). STALLWATCH_RECORD_SCENARIOS=1 also copies each
run's frames into tests/workloads/recorded/ for the replay unit test.
"""

import json
import os
import shutil
import sys
import time
from pathlib import Path

import pytest

from daemon import ROOT

sys.path.insert(0, str(ROOT / "tests" / "workloads"))
from orchestrator import ScenarioUnavailable, run_scenario  # noqa: E402
from scenarios import SCENARIOS  # noqa: E402

SCALE = float(os.environ.get("STALLWATCH_SCENARIO_SCALE", "0.1"))
RECORDED = ROOT / "tests" / "workloads" / "recorded"
RESULTS = Path(os.environ.get("STALLWATCH_SCENARIO_RESULTS", ROOT / "target" / "scenario-results.jsonl"))

# Reporting bounds at default settings, unscaled seconds from onset.
BOUND = {
    "input_starved": 180, "input_bound": 180, "single_thread_bound": 180, "cpu_saturated": 180,
    "io_bound": 180, "shared_gpu": 180,
    "busy_no_progress": 600 + 60, "idle_no_progress": 600 + 60,  # hang time + a minute
    "leftover_process": 600 + 60, "host_memory_pressure": 120,
}
# The kernel's PSI avg10 is a real 10 s average, whatever the scale.
PSI_LAG = {"cpu_saturated": 12, "io_bound": 12, "host_memory_pressure": 12}
# The daemon samples 4 times a second so scaled windows hold enough samples.
CONFIG = f"[diagnosis]\ntime_scale = {SCALE}\n"


WORKLOADS = ROOT / "tests" / "workloads"


def source_line(file, line):
    return (WORKLOADS / file).read_text().splitlines()[line - 1].strip()


def pinned_thread_is_in_burn_cpu(r):
    top = r["hot"][0]
    assert (top["function"], top["file"]) == ("burn_cpu", "pipeline.py"), r["summary"]
    assert top["share"] >= 0.5, r["summary"]


def main_thread_at(function, file, code):
    def check(r):
        main = next(t for t in r["threads"] if t["tid"] == r["pid"])
        top = main["top"][0]
        assert (top["function"], top["file"]) == (function, file), r["summary"]
        assert code in source_line(file, top["line"]), (top, source_line(file, top["line"]))
    return check


# What the job's Python stacks must show, per scenario: (kind, check of its report).
STACKS = {
    "single_thread_bound": ("single_thread_bound", pinned_thread_is_in_burn_cpu),
    "idle_hung": ("idle_no_progress", main_thread_at("Trainer.run", "train.py", "lock.acquire()")),
    "busy_hung": ("busy_no_progress", main_thread_at("Slot.spin_forever", "gpu_link.py", "time.sleep(3600)")),
}


def check_stacks(d, name):
    """The start event of the scenario's kind carries the job's stacks (they
    arrive a burst after the event) and they show the known place."""
    kind, check = STACKS[name]
    deadline = time.monotonic() + 20
    while True:
        start = next(e for e in events_since(d, 0) if e["kind"] == kind and e["phase"] == "start")
        stacks = start["evidence"].get("stacks")
        if stacks or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert stacks and stacks["outcome"] == "sampled", f"no stacks on the {kind} start event: {start}"
    check(stacks)


def events_since(d, after):
    code, _, body = d.get(f"/api/v1/events?after={after}&limit=1000")
    assert code == 200, body
    return json.loads(body)["events"]


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_scenario(name, daemon_factory, tmp_path):
    frames = tmp_path / "frames.jsonl"
    d = daemon_factory(config=CONFIG, interval="250ms")
    try:
        run = run_scenario(name, tmp_path / "work", d.scenario_path, SCALE)
    except ScenarioUnavailable as e:
        pytest.skip(str(e))
    events = []
    try:
        t0 = time.time() - run.elapsed()
        d.start(args=("--record-frames", str(frames)))
        labels = run.labels
        slack = 3.0  # sampling, the simulator's 1 s utilization window, scheduling
        deadlines = [l.onset_s + BOUND[l.kind] * SCALE + PSI_LAG.get(l.kind, 0) + slack for l in labels]
        # Stop early once every label fired and the longest window has passed
        # again (to see that nothing else fires); healthy runs go the distance.
        settle = 130 * SCALE + 5
        end = run.duration_s
        while run.elapsed() < end:
            run.sleep_until(run.elapsed() + 0.5)
            events += events_since(d, events[-1]["id"] if events else 0)
            fired = {(e["kind"], e["gpu"]) for e in events if e["phase"] == "start"}
            if labels and all((l.kind, l.gpu) in fired for l in labels):
                end = min(end, max(run.elapsed() + settle, max(l.onset_s for l in labels) + settle))
            if labels and run.elapsed() > max(deadlines) + 1:
                break
        events += events_since(d, events[-1]["id"] if events else 0)
        assert not run.errors, run.errors
        if name in STACKS and any(e["kind"] == STACKS[name][0] for e in events):
            check_stacks(d, name)
    finally:
        run.stop()
    starts = [e for e in events if e["phase"] == "start"]
    rel = lambda e: e["time"] - t0  # noqa: E731
    report = {"scenario": name, "scale": SCALE, "labels": [], "unexpected": []}
    problems = []
    for label, deadline in zip(labels, deadlines):
        mine = [e for e in starts if e["kind"] == label.kind and e["gpu"] == label.gpu]
        latency = rel(mine[0]) - label.onset_s if mine else None
        report["labels"].append({"kind": label.kind, "gpu": label.gpu, "episodes": len(mine),
                                 "latency_s": latency, "latency_unscaled_s": latency / SCALE if mine else None})
        if not mine:
            problems.append(f"{label.kind} on GPU {label.gpu} never fired (due by {deadline:.1f}s)")
        elif len(mine) > 1:
            problems.append(f"{label.kind} fired {len(mine)} times: {[round(rel(e), 1) for e in mine]}")
        elif not label.onset_s - slack <= rel(mine[0]) <= deadline:
            problems.append(f"{label.kind} fired at {rel(mine[0]):.1f}s, expected in "
                            f"[{label.onset_s:.1f}, {deadline:.1f}]")
    expected = {(l.kind, l.gpu) for l in labels}
    for e in starts:
        if (e["kind"], e["gpu"]) not in expected:
            report["unexpected"].append({"kind": e["kind"], "gpu": e["gpu"], "at_s": rel(e)})
            problems.append(f"unexpected {e['kind']} on GPU {e['gpu']} at {rel(e):.1f}s: {e['evidence']}")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    with open(RESULTS, "a") as f:
        f.write(json.dumps(report) + "\n")
    if os.environ.get("STALLWATCH_RECORD_SCENARIOS"):
        RECORDED.mkdir(parents=True, exist_ok=True)
        shutil.copy(frames, RECORDED / f"{name}.jsonl")
        meta = {"scenario": name, "time_scale": SCALE, "start": t0,
                "labels": [{"kind": l.kind, "gpu": l.gpu, "onset_s": l.onset_s, "deadline_s": dl}
                           for l, dl in zip(labels, deadlines)]}
        (RECORDED / f"{name}.json").write_text(json.dumps(meta, indent=1) + "\n")
    assert not problems, "\n".join(problems) + f"\n\nall events: {[(e['kind'], e['phase'], round(rel(e), 1)) for e in events]}"
