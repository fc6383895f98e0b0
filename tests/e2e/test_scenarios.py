"""The scenario suite: the real daemon watches each labelled scenario of the
training simulator (tests/workloads) and must report exactly what the labels
say, within each kind's bound, once per labelled episode.

All times are scaled by SCALE (the daemon's `diagnosis.time_scale` and the
scenario's phase times alike). STALLWATCH_RECORD_SCENARIOS=1 also copies each
run's frames into tests/workloads/recorded/ for the replay unit test.
"""

import json
import os
import re
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from daemon import ROOT

sys.path.insert(0, str(ROOT / "tests" / "workloads"))
from orchestrator import ScenarioUnavailable, run_scenario  # noqa: E402
from scenario_report import job_output, timeline  # noqa: E402
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
    "spinning": 180, "launch_bound": 300 + 60 + 30,  # window + enter time + slack
    # The next sample after the Xid, which waits up to 1.5 s (not scaled) for its kernel line.
    "gpu_fault": 20,
}
# Hangs whose stacks stand still (every simulated hang: the main thread waits on a lock or
# sleeps in the kernel, the map threads on a full queue) are confirmed by the stacks
# (diagnosis.hang_confirmation): reads at 20, 40 and 60 s of silence, then the kind's 30 s
# enter time; the bound is the target, 2 minutes. The bursts themselves are not scaled (1 s
# each, and the first read of a process makes its spy, up to 2 s): CONFIRM_BURSTS_S more.
CONFIRMED = {"busy_no_progress": 120, "idle_no_progress": 120}
CONFIRM_BURSTS_S = 6.0
# The kernel's PSI avg10 is a real 10 s average, whatever the scale.
PSI_LAG = {"cpu_saturated": 12, "io_bound": 12, "host_memory_pressure": 12}
# The daemon samples 4 times a second so scaled windows hold enough samples.
# A real torch.compile does not get faster with the scale: its longest normal length,
# 10 min at the default and 60 s scaled, would be near a cold compile on a loaded 2-core
# host (25 s on an idle one); 30 min scales to 3 min.
CONFIG = f"[diagnosis]\ntime_scale = {SCALE}\n[diagnosis.phases]\ncompiling_max = \"30m\"\n"


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


# Where the simulator's job stands, per scenario: (kind, check of its stack report).
PLACES = {
    "single_thread_bound": ("single_thread_bound", pinned_thread_is_in_burn_cpu),
    "idle_hung": ("idle_no_progress", main_thread_at("Trainer.run", "train.py", "lock.acquire()")),
    "busy_hung": ("busy_no_progress", main_thread_at("Slot.spin_forever", "gpu_link.py", "time.sleep(3600)")),
}


def check_places(d, name):
    """The start event of the scenario's kind carries the job's stacks (they
    arrive a burst after the event) and they show the known place."""
    kind, check = PLACES[name]
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


# The words of the job's framework, per scenario: (words every start event's hint must hold,
# words none may hold). A PyTorch job is never told of tf.data, a tf.data job never of
# num_workers, and the simulated jobs (no framework loaded) of neither.
TORCH_WORDS, TF_WORDS = ("tf.data", "cache("), ("num_workers", "DataLoader")
PLAIN = ((), TORCH_WORDS + TF_WORDS)
HINT_WORDS = {
    "torch_loader_inline": (("num_workers=0",), TORCH_WORDS),
    "torch_loader_one_worker": (("num_workers",), TORCH_WORDS),
    "torch_main_deadlock": (("Stuck at ",), TORCH_WORDS), "torch_worker_hung": (("Stuck at ",), TORCH_WORDS),
    "tfdata_starved": ((), TF_WORDS), "tfdata_input_bound": (("tf.data",), TF_WORDS),
    "tfdata_cache_memory": ((), TF_WORDS),
    "input_starved": PLAIN, "input_bound_steady": PLAIN, "single_thread_bound": PLAIN,
}


def hint_problems(name, events):
    need, never = HINT_WORDS[name]
    problems = []
    for e in events:
        if e["phase"] != "start":
            continue
        problems += [f"{e['kind']} hint lacks {w!r}: {e['hint']}" for w in need if w not in e["hint"]]
        problems += [f"{e['kind']} hint names {w!r}: {e['hint']}" for w in never if w in e["hint"]]
    return problems


# The job's own phases: the scenario's GPU must have counted time in this phase (a phase the
# daemon never saw would make a scenario without stalls pass for nothing).
PHASES = {"torch_compile": "compiling"}


def phase_problems(d, name):
    phase = PHASES[name]
    seconds = d.metrics().value("stallwatch_gpu_phase_seconds_total", gpu="0", phase=phase)
    return [] if seconds and seconds > 0 else [f"no time counted in the phase {phase}: {seconds}"]


# Hangs named by their stacks: the start event's evidence.stuck must hold these words (the
# place and line, what the thread waits on) and its line be the hung line of the job's code.
STUCK = {
    "torch_main_deadlock": ("idle_no_progress", ["deadlock (torch_loader.py:"], "with lock:"),
    "torch_worker_hung": ("idle_no_progress", ["DataLoader", "run (torch_loader.py:"], "next(batches)"),
}


def stuck_problems(name, events):
    kind, words, code = STUCK[name]
    start = next((e for e in events if e["phase"] == "start" and e["kind"] == kind), None)
    if start is None:
        return []  # reported with the labels
    stuck = start["evidence"].get("stuck")
    if not stuck:
        return [f"{kind} fired without evidence.stuck: {start['evidence']}"]
    text = f"{stuck['place']} {stuck.get('waiting_on', '')}"
    problems = [f"evidence.stuck does not name {w!r}: {stuck}" for w in words if w not in text]
    line = re.search(r"\(torch_loader\.py:(\d+)\)", stuck["place"])
    if not line or code not in source_line("torch_loader.py", int(line.group(1))):
        problems.append(f"evidence.stuck's line is not at {code!r}: {stuck['place']}")
    return problems


# The PyTorch scenarios' stacks: the kinds that carry them, the names their summary holds (the
# user's chain from the helper up to __getitem__), and the framework they name.
TORCH_STACKS = {
    "torch_loader_inline": (("input_bound",), ("smooth_pixels", "decode_image", "__getitem__")),
    "torch_loader_one_worker": (("single_thread_bound",), ("smooth_pixels", "decode_image", "__getitem__")),
}


def torch_stack_problems(d, name, started):
    kinds, names = TORCH_STACKS[name]
    problems = []
    for kind in kinds:
        if (kind, 0) not in started:
            continue  # its absence is reported with the labels
        deadline = started[(kind, 0)] + STACK_WAIT_S
        evidence = {}
        while time.monotonic() < deadline:
            evidence = active_evidence(d).get((kind, 0), {})
            if "stacks" in evidence:
                break
            time.sleep(0.5)
        stacks = evidence.get("stacks") or {}
        if stacks.get("outcome") != "sampled":
            problems.append(f"{kind}: no sampled stacks: {stacks or sorted(evidence)}")
            continue
        problems += [f"{kind}: the stacks' summary does not name {n}: {stacks['summary']!r}"
                     for n in names if n not in stacks["summary"]]
        if stacks.get("framework") != "pytorch":
            problems.append(f"{kind}: the stacks name framework {stacks.get('framework')!r}")
        if (evidence.get("framework") or {}).get("name") != "pytorch":
            problems.append(f"{kind}: evidence.framework is {evidence.get('framework')}")
    return problems


# Python stack evidence: the daemon samples a stalled job's Python stacks (py-spy) and puts
# what it found in the finding's `evidence.stacks`, in /api/v1/status and in the start event.
# Per scenario, the kinds that must carry it and what it must name.
@dataclass(frozen=True)
class Stacks:
    kinds: tuple          # the labelled kinds whose evidence carries stacks
    user_function: str    # the user's function the hottest stack runs under
    user_file: str        # its file, as a base name
    library: str = None   # the library the hottest stack is in ("PIL"), if any


STACKS = {
    "tfdata_starved": Stacks(("input_starved", "single_thread_bound"), "decode_image",
                             "tf_pipeline.py", "PIL"),
}
# A 10 s burst at 20 Hz, not scaled, starts when the episode does: poll this long after it.
STACK_WAIT_S = 20.0
ABSOLUTE_PATH = re.compile(r"(?:^|[\s(\[{<'\"=:,;])/[^\s/]")


def active_evidence(d):
    """{(kind, gpu): evidence} of every active finding now."""
    code, _, body = d.get("/api/v1/status")
    assert code == 200, body
    return {(a["kind"], g["gpu"]): a.get("evidence", {}) for g in json.loads(body)["gpus"] for a in g["active"]}


def absolute_paths(value, where="evidence"):
    """Every string in a JSON value that holds an absolute path, with where it is."""
    if isinstance(value, dict):
        return [p for k, v in value.items() for p in absolute_paths(v, f"{where}.{k}")]
    if isinstance(value, list):
        return [p for i, v in enumerate(value) for p in absolute_paths(v, f"{where}[{i}]")]
    if isinstance(value, str) and (ABSOLUTE_PATH.search(value) or str(ROOT) in value or sys.prefix in value):
        return [f"{where} = {value!r}"]
    return []


def stack_problems(where, evidence, want, pids):
    """What is wrong with `evidence.stacks` of a finding, given the expectation `want`."""
    stacks = evidence.get("stacks")
    if not isinstance(stacks, dict):
        return [f"{where}: no evidence.stacks (keys: {sorted(evidence)})"]
    problems = []
    if stacks.get("outcome") != "sampled":
        problems.append(f"{where}: stacks outcome {stacks.get('outcome')!r}, not 'sampled': {stacks}")
    if stacks.get("pid") not in pids:
        problems.append(f"{where}: stacks of pid {stacks.get('pid')}, not the job's ({pids})")
    if not stacks.get("samples"):
        problems.append(f"{where}: no samples: {stacks}")
    hot = stacks.get("hot") or []
    if not hot:
        problems.append(f"{where}: no hot stacks: {stacks}")
    else:
        top = hot[0]
        if (top.get("user_function"), top.get("user_file")) != (want.user_function, want.user_file):
            problems.append(f"{where}: the hottest stack is not under {want.user_function} in "
                            f"{want.user_file}: {top}")
        if not isinstance(top.get("user_line"), int) or top["user_line"] <= 0:
            problems.append(f"{where}: the hottest stack has no user line: {top}")
        if want.library and want.library not in f"{top.get('function')} {top.get('file')}":
            problems.append(f"{where}: the hottest stack is not in {want.library}: {top}")
    summary = stacks.get("summary") or ""
    for name in (want.user_function, want.user_file, want.library):
        if name and name not in summary:
            problems.append(f"{where}: the summary does not name {name}: {summary!r}")
    problems += [f"{where}: absolute path in {p}" for p in absolute_paths(evidence)]
    return problems


def check_stacks(d, run, want, started, events):
    """Polls /api/v1/status until each kind in `want` that started carries stacks (at most
    STACK_WAIT_S after its start event was seen), then checks the findings and the start
    events. `started` maps (kind, gpu) to when its start event was seen (monotonic)."""
    pending = {key: seen for key, seen in started.items() if key[0] in want.kinds}
    found = {}
    while pending:
        evidence = active_evidence(d)
        for key in list(pending):
            if "stacks" in evidence.get(key, {}):
                found[key] = evidence[key]
                del pending[key]
            elif key not in evidence or time.monotonic() > pending[key] + STACK_WAIT_S:
                found[key] = evidence.get(key, {})
                del pending[key]
        time.sleep(0.5)
    events += events_since(d, events[-1]["id"] if events else 0)
    problems = []
    for (kind, gpu), evidence in found.items():
        problems += stack_problems(f"{kind} on GPU {gpu} (/api/v1/status)", evidence, want, run.pids())
        start = [e for e in events if e["phase"] == "start" and (e["kind"], e["gpu"]) == (kind, gpu)][0]
        again = [e for e in events_since(d, start["id"] - 1) if e["id"] == start["id"]]
        problems += stack_problems(f"{kind} on GPU {gpu} (start event {start['id']})",
                                   (again or [start])[0].get("evidence", {}), want, run.pids())
    return problems


def wait_for_quiet_pressure(below=0.05, longest_s=30.0):
    """Waits (at most `longest_s`) until the host's PSI `some avg10` for I/O and
    memory is below `below`: the PSI rules read the whole host's pressure, and what
    the last scenario (or anything else) caused decays over tens of seconds. A
    scenario started in it fired host_memory_pressure 6 s before its cause. (CPU
    pressure is left out: on a busy 2-core machine it may never settle.)"""
    deadline = time.monotonic() + longest_s
    while time.monotonic() < deadline:
        try:
            levels = [float(Path(f"/proc/pressure/{r}").read_text().split()[1].split("=")[1])
                      for r in ("io", "memory")]
        except (OSError, IndexError, ValueError):
            return  # no PSI here: the PSI rules have nothing to read either
        if max(levels) < below * 100:  # avg10 is in percent
            return
        time.sleep(1.0)


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_scenario(name, daemon_factory, tmp_path):
    frames = tmp_path / "frames.jsonl"
    d = daemon_factory(config=CONFIG, interval="250ms")
    wait_for_quiet_pressure()
    try:
        run = run_scenario(name, tmp_path / "work", d.scenario_path, SCALE)
    except ScenarioUnavailable as e:
        pytest.skip(str(e))
    events = []
    started = {}  # (kind, gpu) -> when its start event was seen (monotonic)
    stack_check = []
    try:
        t0 = time.time() - run.elapsed()
        d.start(args=("--record-frames", str(frames)))
        labels = run.labels
        slack = 3.0  # sampling, the simulator's 1 s utilization window, scheduling
        deadlines = [l.onset_s + PSI_LAG.get(l.kind, 0) + slack
                     + (CONFIRMED[l.kind] * SCALE + CONFIRM_BURSTS_S if l.kind in CONFIRMED
                        else BOUND[l.kind] * SCALE) for l in labels]
        # Stop early once every label fired and the longest window has passed
        # again (to see that nothing else fires); healthy runs go the distance.
        settle = 130 * SCALE + 5
        end = run.duration_s
        while run.elapsed() < end:
            run.sleep_until(run.elapsed() + 0.5)
            events += events_since(d, events[-1]["id"] if events else 0)
            fired = {(e["kind"], e["gpu"]) for e in events if e["phase"] == "start"}
            for key in fired - set(started):
                started[key] = time.monotonic()
            if labels and all((l.kind, l.gpu) in fired for l in labels):
                end = min(end, max(run.elapsed() + settle, max(l.onset_s for l in labels) + settle))
            if labels and run.elapsed() > max(deadlines) + 1:
                break
        events += events_since(d, events[-1]["id"] if events else 0)
        for key in {(e["kind"], e["gpu"]) for e in events if e["phase"] == "start"} - set(started):
            started[key] = time.monotonic()
        if name in STACKS:  # while the job still runs
            stack_check = check_stacks(d, run, STACKS[name], started, events)
        if name in TORCH_STACKS:
            stack_check = torch_stack_problems(d, name, started)
        if name in PHASES:
            stack_check = phase_problems(d, name)
        assert not run.errors, run.errors
        if name in PLACES and any(e["kind"] == PLACES[name][0] for e in events):
            check_places(d, name)
    finally:
        status = run.job_status()
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
    problems += stack_check
    if name in HINT_WORDS:
        problems += hint_problems(name, events)
    if name in STUCK:
        problems += stuck_problems(name, events)
    if name in STACKS:
        report["stack_problems"] = stack_check
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
    if problems and frames.exists():
        # The frames the daemon saw, for replaying a failure that timing made.
        kept = RESULTS.parent / "scenario-failures" / f"{name}-{int(t0)}.jsonl"
        kept.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(frames, kept)
        problems.append(f"frames kept in {kept} (t0 {t0:.3f})")
        problems += ["", "what the daemon saw:", *timeline(frames, t0), "", *status, *job_output(run)]
    if problems:  # pytest.fail: an assert would print the long list twice
        pytest.fail("\n".join(problems) + f"\n\nall events: {[(e['kind'], e['phase'], round(rel(e), 1)) for e in events]}")
