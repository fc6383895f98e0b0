"""Runs a labelled scenario: starts its jobs (real processes, each in its own
session), and from a background thread rewrites the stand-in NVML scenario
file every `tick_s` with what the GPU link says (utilization, power, memory,
processes with their real pids). `stop()` ends every process and removes the
link file and any cgroups.

    run = run_scenario("input_starved", tmp_path, tmp_path / "nvml.json", 0.1)
    try:
        ...  # start the daemon with STALLWATCH_FAKE_NVML=tmp_path/"nvml.json"
    finally:
        run.stop()
"""

import collections
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import cgroups  # noqa: E402
from gpu_link import GpuLink  # noqa: E402
from gpu_meter import GpuMeter  # noqa: E402

HERE = Path(__file__).resolve().parent
MIB = 1 << 20


class ScenarioUnavailable(Exception):
    """The scenario needs something this host cannot give (the message says what)."""


def write_json_atomically(path, value):
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    with os.fdopen(fd, "w") as f:
        json.dump(value, f)
    os.replace(tmp, path)


def make_data_file(path, mib):
    if path.exists() and path.stat().st_size == mib * MIB:
        return
    with open(path, "wb") as f:
        for _ in range(mib):
            f.write(os.urandom(MIB))
        f.flush()
        os.fsync(f.fileno())


class JobProcess:
    def __init__(self, spec, popen, stdout_path, stderr_path, groups):
        self.spec = spec
        self.popen = popen
        self.pid = popen.pid
        self.stdout_path = stdout_path
        self.stderr_path = stderr_path
        self.groups = groups

    def stdout_bytes(self):
        return self.stdout_path.stat().st_size


class Run:
    """A running scenario. Times given to and returned by it are scaled seconds."""

    def __init__(self, scenario, workdir, fake_scenario_path, time_scale, on_tick, tick_s, python):
        self.scenario = scenario
        self.workdir = Path(workdir)
        self.fake_scenario_path = Path(fake_scenario_path)
        self.time_scale = time_scale
        self.on_tick = on_tick
        self.tick_s = tick_s
        self.python = python
        self.jobs = {}
        self.history = collections.deque(maxlen=4096)  # (elapsed, [gpu frame, ...])
        self.latest = None
        self.errors = []
        self._seen_pids = set()
        self._pending = sorted(scenario.jobs, key=lambda j: j.start_s)
        self._stop = threading.Event()
        for spec in scenario.jobs:  # before the clock starts: data the job reads
            if spec.prepare:
                self._prepare(spec)
        link_dir = "/dev/shm" if os.access("/dev/shm", os.W_OK) else str(self.workdir)
        fd, link_path = tempfile.mkstemp(dir=link_dir, prefix="stallwatch-gpu-link-", suffix=".bin")
        os.close(fd)
        self.link = GpuLink.create(link_path)
        self.meter = GpuMeter(self.link, scenario.gpus)
        for spec in scenario.jobs:  # before the clock starts: this takes a while
            if spec.data_file_mib:
                make_data_file(self.workdir / "data.bin", spec.data_file_mib)
        self.started = time.monotonic()
        self._thread = None

    # -- time and labels -------------------------------------------------
    def elapsed(self):
        return time.monotonic() - self.started

    @property
    def duration_s(self):
        return self.scenario.duration_s * self.time_scale

    @property
    def labels(self):
        """Expected episodes in scaled seconds since the start: (kind, onset, end, gpu)."""
        return [l.scaled(self.time_scale) for l in self.scenario.labels]

    @property
    def warmup_s(self):
        return self.scenario.warmup_s * self.time_scale

    def sleep_until(self, elapsed):
        time.sleep(max(0.0, elapsed - self.elapsed()))

    def pids(self):
        """Pids of the jobs' leaders and of every process seen holding a GPU."""
        return sorted({j.pid for j in self.jobs.values()} | self._seen_pids)

    # -- processes --------------------------------------------------------
    def _args(self, spec):
        subs = {"workdir": str(self.workdir), "data_file": str(self.workdir / "data.bin")}
        return [a.format(**subs) for a in spec.args]

    def _prepare(self, spec):
        """Runs the job's script with --prepare (it writes the files it will read)."""
        cmd = [self.python, str(HERE / spec.script), "--prepare", *self._args(spec)]
        done = subprocess.run(cmd, cwd=self.workdir, stdin=subprocess.DEVNULL,
                              capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"{spec.name}: --prepare failed ({done.returncode}): {done.stderr[-2000:]}")

    def _launch(self, spec):
        wd = self.workdir
        cmd = [self.python, str(HERE / spec.script), "--link", self.link.path,
               "--time-scale", repr(self.time_scale), *self._args(spec)]
        if spec.cpus:
            cmd = ["taskset", "-c", spec.cpus, *cmd]
        out, err = wd / f"{spec.name}.out", wd / f"{spec.name}.err"
        with open(out, "wb") as stdout, open(err, "wb") as stderr:
            popen = subprocess.Popen(cmd, cwd=wd, stdout=stdout, stderr=stderr,
                                     stdin=subprocess.DEVNULL, start_new_session=True)
        groups = []
        try:
            tag = f"stallwatch-{self.scenario.name}-{spec.name}-{popen.pid}"
            if spec.memory_limit_mib:
                g = cgroups.Group("memory", tag)
                groups.append(g)
                g.limit_memory(spec.memory_limit_mib * MIB)
                g.add(popen.pid)
            if spec.read_mib_per_s or spec.write_mib_per_s:
                g = cgroups.Group("blkio", tag)
                groups.append(g)
                g.limit_io(cgroups.block_device(str(wd)),
                           read_bps=(spec.read_mib_per_s or 0) * MIB,
                           write_bps=(spec.write_mib_per_s or 0) * MIB)
                g.add(popen.pid)
        except OSError as e:
            self.errors.append(f"{spec.name}: cgroup setup failed: {e}")
        self.jobs[spec.name] = JobProcess(spec, popen, out, err, groups)

    def _launch_due(self):
        while self._pending and self._pending[0].start_s * self.time_scale <= self.elapsed():
            self._launch(self._pending.pop(0))

    # -- the tick loop ----------------------------------------------------
    def tick(self):
        self._launch_due()
        frame = self.meter.frame()
        for spec, gpu in zip(self.scenario.gpus, frame):
            # The stand-in library reports a listed Xid once, however often the file is rewritten.
            if spec.xid_at_s is not None and self.elapsed() >= spec.xid_at_s * self.time_scale:
                gpu["nvml"]["xids"] = [{"xid": spec.xid}]
        self.latest = {"gpus": [g["nvml"] for g in frame]}
        write_json_atomically(self.fake_scenario_path, self.latest)
        self.history.append((self.elapsed(), frame))
        for gpu in frame:
            self._seen_pids.update(gpu["processes"])
        if self.on_tick is not None:
            self.on_tick(self, frame)

    def _loop(self):
        while not self._stop.wait(self.tick_s):
            try:
                self.tick()
            except Exception as e:  # keep ticking; the test sees run.errors
                self.errors.append(repr(e))

    def start(self):
        self.tick()
        self._thread = threading.Thread(target=self._loop, name="scenario_tick", daemon=True)
        self._thread.start()
        return self

    def utilization(self, gpu=0, since=None):
        """Utilization samples (0-1) of one GPU recorded since `since` (scaled s)."""
        return [f[gpu]["utilization"] for t, f in list(self.history) if since is None or t >= since]

    def job_status(self):
        """One line per job: running or its exit status, and its memory cgroup's
        limit hits and OOM kills (for a failure's report: call before stop())."""
        lines = []
        for name, job in self.jobs.items():
            code = job.popen.poll()
            state = "running" if code is None else f"exited with {code}"
            memory = " ".join(e for g in job.groups if g.controller == "memory" and (e := g.memory_events()))
            lines.append(f"{name} (pid {job.pid}): {state}" + (f"; memory cgroup: {memory}" if memory else ""))
        return lines

    def stop(self):
        if self._stop.is_set():
            return
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        pgids = {j.pid for j in self.jobs.values()}
        leftovers = {s["pid"] for s in self.link.slots()}
        for sig in (signal.SIGTERM, signal.SIGKILL):
            for pgid in pgids:
                try:
                    os.killpg(pgid, sig)
                except ProcessLookupError:
                    pass
            deadline = time.monotonic() + 3.0
            while time.monotonic() < deadline:
                for j in self.jobs.values():
                    j.popen.poll()
                if not self._alive(pgids):
                    break
                time.sleep(0.02)
            else:
                continue
            break
        for pid in leftovers:  # a GPU holder that left its job's group but not its session
            try:
                if os.getsid(pid) in pgids:
                    os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        for j in self.jobs.values():
            for g in j.groups:
                g.remove()
        self.link.close()
        try:
            os.unlink(self.link.path)
        except FileNotFoundError:
            pass

    @staticmethod
    def _alive(pgids):
        for pgid in pgids:
            try:
                os.killpg(pgid, 0)
                return True
            except ProcessLookupError:
                pass
        return False

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()


def run_scenario(name, workdir, fake_scenario_path, time_scale, on_tick=None, tick_s=0.2,
                 python=sys.executable):
    """Starts scenario `name` (see scenarios.SCENARIOS) and returns its Run.
    Raises ScenarioUnavailable when the host cannot run it."""
    from scenarios import SCENARIOS, unavailable_reason
    scenario = SCENARIOS[name]
    Path(workdir).mkdir(parents=True, exist_ok=True)
    reason = unavailable_reason(scenario, workdir, python)
    if reason:
        raise ScenarioUnavailable(f"{name}: {reason}")
    return Run(scenario, workdir, fake_scenario_path, time_scale, on_tick, tick_s, python).start()
