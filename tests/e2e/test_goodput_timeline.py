"""The GPU-time ledger against a real PyTorch job's known timeline (docs/goodput.md, "The
timeline"): torch on CPU (tests/e2e/torch_timeline.py) started by the real `torchrun
--max-restarts=1`, driving its stand-in GPU through the GPU link (busy while it computes a
training step, idle otherwise): its imports, a real torch.compile warm-up, training, a
slow DataLoader, a real torch.save, a deadlock, SIGKILL, torchrun's restart, training
again, the end. The job writes each stretch's true start; the test reads the daemon's
ledger as it goes (/api/v1/status every half second: `time` and `time_held_seconds`) and
at the end (`stallwatch_gpu_time_seconds_total`), and checks that each stretch was booked
to its state within max(10% of its length, 15 s) and that the states add up to the time
the daemon watched within 1%. The table goes to stdout and target/goodput-timeline.md.

The daemon runs at `diagnosis.time_scale = 0.05` (as test_diagnosis.py's FAST): every
window, enter and exit time, the warm-up (6 s) and the hang time (30 s at least; the
stacks' confirming reads 1 s apart) twenty times shorter, so that the slow DataLoader is
found as `input` and the deadlock as `hung` within seconds and the whole timeline takes
about four minutes. What does not get shorter with the scale, a real compile and a real
save, keeps its real length; their longest normal length (`compiling_max`,
`checkpointing_max`) is raised to 30 minutes (90 s scaled) so that they stay normal
phases. The phases' reads stay at least 5 s apart, and the ledger's 10 s of sustained
work that ends a start-up is not scaled.
"""

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import torch  # noqa: F401 (the test needs the real package; its absence is an install error)

from daemon import ROOT, free_port, gpu, kill_group

sys.path.insert(0, str(ROOT / "tests" / "workloads"))
from gpu_link import GpuLink  # noqa: E402
from gpu_meter import GpuMeter, GpuSpec  # noqa: E402

JOB = Path(__file__).parent / "torch_timeline.py"
RUN_ID = "timeline-35"
CONFIG = ('[diagnosis]\ntime_scale = 0.05\n'
          '[diagnosis.phases]\ncompiling_max = "30m"\ncheckpointing_max = "30m"\n')
STRETCHES = dict(TIMELINE_TRAIN_S="30", TIMELINE_SLOW_S="30", TIMELINE_BETWEEN_S="15",
                 TIMELINE_RESTART_TRAIN_S="25", TIMELINE_SHARDS="500000")
DEADLOCK_S = 25     # the deadlock lasts at least this long before the worker is killed
NO_JOB_S = 8        # watched after torchrun exits
TABLE = ROOT / "target" / "goodput-timeline.md"


def tolerance(seconds):
    return max(0.1 * seconds, 15.0)


class Gpus:
    """Two stand-in GPUs fed from the GPU link five times a second: GPU 0 the job's,
    GPU 1 never used (its `no_job` seconds are the time the daemon watched)."""

    def __init__(self, path):
        self.link = GpuLink.create(str(path))
        self.meter = GpuMeter(self.link, [GpuSpec(), GpuSpec()])
        self.daemon = None
        self.errors = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="gpus", daemon=True)

    def scenario(self):
        return {"gpus": [gpu(i, **f["nvml"]) for i, f in enumerate(self.meter.frame())]}

    def start(self, daemon):
        self.daemon = daemon
        self._thread.start()

    def _loop(self):
        while not self._stop.wait(0.2):
            try:
                self.daemon.set_scenario(self.scenario())
            except Exception as e:  # keep feeding; the test reports errors
                self.errors.append(repr(e))

    def stop(self):
        if self._stop.is_set():
            return
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)
        self.link.close()


class Ledger:
    """GPU 0's ledger read every half second from /api/v1/status: (wall time, the time up
    to which it is booked, seconds per state, active kinds, phase)."""

    def __init__(self, daemon):
        self.daemon = daemon
        self.snapshots = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="ledger", daemon=True)
        self._thread.start()

    def read(self):
        code, _, body = self.daemon.get("/api/v1/status")
        assert code == 200, body
        at = time.time()
        g = json.loads(body)["gpus"][0]
        # What is held back (at most 5 minutes) is the latest stretch of the watched time;
        # the counters hold everything before it.
        return {"at": at, "settled": at - g["time_held_seconds"], "time": g["time"],
                "held": g["time_held_seconds"], "active": sorted(a["kind"] for a in g["active"]),
                "phase": (g.get("phase") or {}).get("phase")}

    def _loop(self):
        while not self._stop.wait(0.5):
            try:
                self.snapshots.append(self.read())
            except (OSError, AssertionError, ValueError, KeyError):
                pass

    def stop(self):
        self._stop.set()
        self._thread.join(timeout=5)
        self.snapshots.append(self.read())

    def at(self, t):
        """The snapshot whose booked time ends nearest `t`."""
        return min(self.snapshots, key=lambda s: abs(s["settled"] - t))

    def booked(self, a, b):
        """Seconds booked per state for the wall-clock stretch [a, b]."""
        first, last = self.at(a), self.at(b)
        return {k: last["time"][k] - first["time"].get(k, 0.0) for k in last["time"]}

    def seen(self, predicate):
        return any(predicate(s) for s in self.snapshots[-4:])


def read_marks(directory):
    path = directory / "marks.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def wait_mark(directory, attempt, name, launcher, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for m in read_marks(directory):
            if m["attempt"] == attempt and m["mark"] == name:
                return m
        assert launcher.poll() is None, f"torchrun exited with {launcher.returncode} before {name!r}"
        time.sleep(0.2)
    raise AssertionError(f"attempt {attempt} did not reach {name!r} within {timeout} s")


def run_of(daemon, pid):
    m = daemon.metrics()
    found = m.find("stallwatch_job_rank_info", pid=str(pid))
    return found[0].labels.get("run") if found else None


def stretches(marks, killed, watch_start, watch_end):
    """The true timeline: (name, state, start, end)."""
    first = [m for m in marks if m["attempt"] == 0]
    second = [m for m in marks if m["attempt"] == 1]
    names = {
        "start": ("imports, model set-up", "startup"),
        "compile": ("torch.compile warm-up", "compiling"),
        "train": ("training", "productive"),
        "slow_input": ("slow DataLoader", "input"),
        "checkpoint": ("torch.save", "checkpointing"),
        "deadlock": ("deadlock", "hung"),
    }
    out = [("torchrun starting", "no_job", watch_start, first[0]["t"])]
    for m, nxt in zip(first, first[1:] + [None]):
        name, state = names[m["mark"]]
        out.append((name, state, m["t"], nxt["t"] if nxt else killed))
    train = next(m for m in second if m["mark"] == "train")
    end = next(m for m in second if m["mark"] == "end")
    out.append(("killed, restarted by torchrun", "recovery", killed, train["t"]))
    out.append(("training", "productive", train["t"], end["t"]))
    out.append(("ended", "no_job", end["t"], watch_end))
    return out


def table(rows, header):
    lines = [header, "",
             "| # | stretch | true (s) | booked to its state (s) | state | the rest of the stretch (s) |",
             "|---|---|---|---|---|---|"]
    for i, (name, state, true, booked, rest) in enumerate(rows, 1):
        also = ", ".join(f"{k} {v:.1f}" for k, v in sorted(rest.items(), key=lambda kv: -kv[1]) if v >= 0.5)
        lines.append(f"| {i} | {name} | {true:.1f} | {booked:.1f} | `{state}` | {also or '-'} |")
    return "\n".join(lines) + "\n"


def test_a_real_torch_jobs_timeline_is_booked_stretch_by_stretch(daemon_factory, tmp_path):
    gpus = Gpus(tmp_path / "gpu.link")
    d = daemon_factory(gpus.scenario(), config=CONFIG)
    watch_start = time.time()
    d.start()
    gpus.start(d)
    ledger = Ledger(d)
    work = tmp_path / "job"
    work.mkdir()
    log = open(tmp_path / "torchrun.log", "w")
    env = dict(os.environ, GPU_LINK=str(gpus.link.path), GPU_INDEX="0", OMP_NUM_THREADS="1",
               MKL_NUM_THREADS="1", PYTHONUNBUFFERED="1", **STRETCHES)
    launcher = subprocess.Popen(
        [str(Path(sys.executable).with_name("torchrun")), "--nnodes=1", "--nproc-per-node=1",
         "--max-restarts=1", "--rdzv-backend=c10d", f"--rdzv-endpoint=127.0.0.1:{free_port()}",
         f"--rdzv-id={RUN_ID}", str(JOB), str(work)],
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True, env=env)
    problems = []
    try:
        compiling = wait_mark(work, 0, "compile", launcher, 120)
        first_run = run_of(d, compiling["pid"])
        deadlock = wait_mark(work, 0, "deadlock", launcher, 360)
        # Killed once the deadlock has lasted DEADLOCK_S and the daemon has called it a hang
        # (or a minute passed: then the table shows what it booked instead).
        while time.time() < deadlock["t"] + 60 and not (
                time.time() >= deadlock["t"] + DEADLOCK_S
                and ledger.seen(lambda s: "idle_no_progress" in s["active"] or "busy_no_progress" in s["active"])):
            time.sleep(0.2)
        os.kill(deadlock["pid"], signal.SIGKILL)
        killed = time.time()
        restarted = wait_mark(work, 1, "train", launcher, 120)
        second_run = run_of(d, restarted["pid"])
        wait_mark(work, 1, "end", launcher, 120)
        assert launcher.wait(timeout=60) == 0, "torchrun did not exit 0 after the restarted worker ended"
        time.sleep(NO_JOB_S)
        ledger.stop()
        watch_end = time.time()
        m = d.metrics()
    finally:
        gpus.stop()
        kill_group(launcher)
        for mk in read_marks(work):  # torchrun starts its workers in sessions of their own
            try:
                os.kill(mk["pid"], signal.SIGKILL)
            except ProcessLookupError:
                pass
        log.close()
    assert not gpus.errors, gpus.errors

    for run in (first_run, second_run):
        if run != f"torchelastic:{RUN_ID}":
            problems.append(f"a worker's run is {run!r}, not torchelastic:{RUN_ID}")

    rows = []
    for name, state, a, b in stretches(read_marks(work), killed, watch_start, watch_end):
        booked = ledger.booked(a, b)
        true = b - a
        mine = booked.get(state, 0.0)
        rows.append((name, state, true, mine, {k: v for k, v in booked.items() if k != state}))
        if abs(mine - true) > tolerance(true):
            problems.append(f"{name}: {true:.1f} s booked {mine:.1f} s to {state} "
                            f"(within {tolerance(true):.1f} s), the stretch's ledger: "
                            + json.dumps({k: round(v, 1) for k, v in booked.items() if abs(v) >= 0.5}))

    # The run's rank left the GPU at the end: the daemon holds those no_job seconds back
    # (at most 5 minutes) in case the run comes back (then they are its recovery).
    held_end = ledger.snapshots[-1]["held"]
    if held_end >= 0.5:
        rows[-1][4]["held, not yet booked"] = held_end

    # At the end: the counters of the scrape, what is still held, the time watched.
    states = {s.labels["state"]: s.value for s in m.find("stallwatch_gpu_time_seconds_total", gpu="0")}
    unused = {s.labels["state"]: s.value for s in m.find("stallwatch_gpu_time_seconds_total", gpu="1")}
    held = ledger.snapshots[-1]["held"]
    watched = unused["no_job"]
    wall = watch_end - watch_start
    total = sum(states.values()) + held
    if abs(total - watched) > 0.01 * watched:
        problems.append(f"GPU 0's states add up to {total:.1f} s (held {held:.1f}), the daemon watched {watched:.1f} s")
    if abs(watched - wall) > 0.01 * wall:
        problems.append(f"the daemon watched {watched:.1f} s of a {wall:.1f} s wall time")
    lost = m.find("stallwatch_gpu_lost_progress_seconds_total", gpu="0")
    after_checkpoint = next(r for r in rows if r[0] == "training" and rows[rows.index(r) - 1][0] == "torch.save")
    if not lost:
        problems.append("no stallwatch_gpu_lost_progress_seconds_total for GPU 0")
    elif abs(lost[0].value - after_checkpoint[2]) > tolerance(after_checkpoint[2]):
        problems.append(f"lost progress {lost[0].value:.1f} s, the training since the checkpoint "
                        f"{after_checkpoint[2]:.1f} s")

    header = (f"Watched {watched:.1f} s (wall {wall:.1f} s); GPU 0's ledger at the end: "
              + ", ".join(f"{k} {v:.1f}" for k, v in sorted(states.items(), key=lambda kv: -kv[1]) if v >= 0.05)
              + f"; held {held:.1f}; lost progress "
              + (f"{lost[0].value:.1f} s" if lost else "not exported") + ".")
    text = table(rows, header)
    print("\n" + text)
    TABLE.parent.mkdir(exist_ok=True)
    TABLE.write_text(text)
    assert not problems, "\n".join(problems) + "\n\n" + text
