"""`stallwatch replay`: the frames a real daemon recorded (`--record-frames`),
fed through the detectors at speed, give the findings the live daemon gave:
the same events in the same order, with the same evidence and hints.

The live daemon runs with its stacks turned off: the frames carry no stack
reads, so the replay applies the rules as such a daemon does (docs/testing.md).
"""

import json
import subprocess
import sys

from daemon import BINARY, ROOT

sys.path.insert(0, str(ROOT / "tests" / "workloads"))
from orchestrator import run_scenario  # noqa: E402

SCALE = 0.1
CONFIG = f"[diagnosis]\ntime_scale = {SCALE}\n[stacks]\nenabled = false\n"


def logged_events(log_text):
    """The daemon's "stall started" / "stall ended" JSON log lines as
    (phase, kind, gpu, since, evidence, hint)."""
    out = []
    for line in log_text.splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        f = record.get("fields", record)
        if f.get("message") not in ("stall started", "stall ended"):
            continue
        phase = "start" if f["message"] == "stall started" else "end"
        out.append((phase, f["kind"], f["gpu"], f["since"], json.loads(f["evidence"]), f["hint"]))
    return out


def differences(a, b, path=""):
    """Where two JSON values differ, as "path: a != b" lines."""
    if isinstance(a, dict) and isinstance(b, dict):
        return [d for k in sorted(set(a) | set(b)) for d in differences(a.get(k), b.get(k), f"{path}.{k}")]
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in differences(x, y, f"{path}[{i}]")]
    return [] if a == b else [f"{path}: {a!r} != {b!r}"]


def as_logged(e):
    return (e["phase"], e["kind"], e["gpu"], e["since"], e["evidence"], e["hint"])


def test_replay_of_a_recorded_run_gives_the_live_events(daemon_factory, tmp_path):
    frames = tmp_path / "frames.jsonl"
    d = daemon_factory(config=CONFIG, interval="250ms")
    # A job starved of input from its onset (15 s scaled), then gone: an
    # episode that starts and, with its job, ends.
    run = run_scenario("input_starved", tmp_path / "work", d.scenario_path, SCALE)
    try:
        d.start(args=("--record-frames", str(frames), "--log-format", "json"))
        run.sleep_until(run.duration_s)
    finally:
        run.stop()
    run_after_stop = 3.0
    deadline = run.elapsed() + run_after_stop
    while run.elapsed() < deadline:
        d.set_scenario({"gpus": [g | {"processes": [], "utilization_gpu": 0}
                                 for g in run.latest["gpus"]]})
        run.sleep_until(run.elapsed() + 0.25)
    _, _, body = d.get("/api/v1/events?limit=1000")
    live = json.loads(body)["events"]
    assert d.stop() == 0
    logged = logged_events(d.logs())

    done = subprocess.run([str(BINARY), "replay", "--config", str(d.config_path), "--json", str(frames)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode in (0, 1), done.stderr
    replayed = json.loads(done.stdout)

    starts = [(e["kind"], e["gpu"]) for e in live if e["phase"] == "start"]
    assert ("input_starved", 0) in starts, f"the live daemon found {starts}:\n{d.logs()[-3000:]}"
    # The API answered before the last frames: what it gave, the replay gives first.
    assert replayed["events"][:len(live)] == live, differences(replayed["events"][:len(live)], live)[:20]
    # The log has every event, up to the last frame recorded.
    assert [as_logged(e) for e in replayed["events"]] == logged
    assert replayed["findings"] == {k: starts.count((k, 0)) for k, _ in set(starts)}
    assert done.returncode == 1  # findings
    assert replayed["frames"] == sum(1 for _ in frames.open())
