"""The load both benchmarks put on the host, and how they watch a process.

Shared by scripts/bench-sample and scripts/bench-overhead (Python 3 standard
library only): 8 stand-in GPUs (the stand-in NVML library, driven by a
scenario file; each GPU at a steady 50%, or busy or starved), jobs of 9 real
processes (a Python process with 20 threads holding a GPU, and 8 `sleep`
children; other shapes below), unrelated `sleep`s, a process group
that is killed on exit, /proc readings (CPU ticks, per-thread CPU, RSS) and
/metrics scraping with a check that a scrape shows the load.
"""

import ctypes
import gzip
import http.client
import itertools
import os
import random
import re
import signal
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "e2e"))
import standin_gpu  # noqa: E402  (tests/e2e/standin_gpu.py)

RELEASE = Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target")) / "release"
BINARY = RELEASE / "stallwatch"
FAKE_NVML = RELEASE / "libnvidia_ml.so"

GPUS = 8
JOB_THREADS = 20  # in the GPU-holding process: main + 19
JOB_CHILDREN = 8  # `sleep` children: 9 processes per job
TICKS = os.sysconf("SC_CLK_TCK")
PR_SET_PDEATHSIG = 1
OPENMETRICS = "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5"

# The GPU-holding process of one job. It exits (killing its children) when
# its stdin reaches EOF; like every process started here it also gets SIGKILL
# when this script dies, and `sleep`s end by themselves after a bounded time.
# Each line "spin" on its stdin starts one more thread that runs a pure
# Python busy loop (a thread pinned at a full core, holding the GIL). A busy
# holder writes a line to its stdout (a pipe nobody reads after "ready":
# 5 bytes a second fill it in hours) after each step.
JOB_CODE = r"""
import ctypes, signal, subprocess, sys, threading, time
threads, children, child_threads, life, busy = map(int, sys.argv[1:6])
die = lambda: ctypes.CDLL(None).prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
worker = [sys.executable, "-c", WORKER_CODE, str(child_threads), str(life)]
kid = worker if child_threads > 1 else ["sleep", str(life)]
kids = [subprocess.Popen(kid, preexec_fn=die, stdout=subprocess.PIPE) for _ in range(children)]
for k in kids:
    if child_threads > 1:
        k.stdout.readline()
stop, ready = threading.Event(), threading.Event()
def waker():
    while not stop.wait(0.2):
        pass
def compute():
    # A training step a second, and its log line (the job's output grows, as
    # a training job's does: it is not silent, so not read for a hang).
    ready.wait()
    while True:
        t = time.perf_counter()
        while time.perf_counter() - t < 0.02:
            pass
        sys.stdout.write("step\n")
        sys.stdout.flush()
        time.sleep(0.98)
for i in range(threads - 1):
    if not busy:
        target = stop.wait
    else:
        target = compute if i == 0 else waker
    threading.Thread(target=target, daemon=True).start()
def spin():
    n = 0
    while True:
        n += 1
print("ready", flush=True)
ready.set()
for line in sys.stdin:
    if line.strip() == "spin":
        threading.Thread(target=spin, daemon=True).start()
for k in kids:
    k.kill()
"""

# A DataLoader-like worker process of a job: `threads` threads, asleep, for
# `life` seconds at most.
WORKER_CODE = r"""
import sys, threading, time
threads, life = map(int, sys.argv[1:3])
for i in range(threads - 1):
    threading.Thread(target=time.sleep, args=(life,), daemon=True).start()
print("ready", flush=True)
time.sleep(life)
"""

JOB_CODE = JOB_CODE.replace("WORKER_CODE", repr(WORKER_CODE))


class Shape:
    """What one job is: a GPU-holding process with `threads` threads and
    `children` child processes of `child_threads` threads each (`sleep`s when
    1, Python processes otherwise)."""

    def __init__(self, name, threads, children, child_threads=1, busy=False):
        self.name, self.threads, self.children, self.child_threads = name, threads, children, child_threads
        self.busy = busy

    @property
    def processes(self):
        return self.children + 1

    @property
    def total_threads(self):
        return self.threads + self.children * self.child_threads

    def __str__(self):
        kids = f"{self.children} `sleep`s" if self.child_threads == 1 else f"{self.children} workers of {self.child_threads} threads"
        holder = f"{self.threads}-thread holder" + (" (busy)" if self.busy else "")
        return f"{holder} + {kids}"


BENCH = Shape("bench", JOB_THREADS, JOB_CHILDREN)
# 16 DataLoader-like workers of 4 threads and a holder of 60 threads.
HEAVY = Shape("heavy", 60, 16, 4)
# The same, its holder busy as a training process is: one thread computes
# 20 ms every second and the others wake five times a second; the workers
# wait, as a DataLoader's do while its queue is full.
HEAVY_BUSY = Shape("heavy-busy", 60, 16, 4, busy=True)
# Training-like jobs (the holder busy as above): the bench's shape (a
# 20-thread holder and 8 `sleep` children), and a 100-thread holder with 4
# worker processes of 4 threads.
BUSY_20 = Shape("20+8", JOB_THREADS, JOB_CHILDREN, busy=True)
BUSY_100 = Shape("100+4", 100, 4, 4, busy=True)

# Unrelated processes: one shell forking `sleep`s, all in one process group.
UNRELATED_CODE = 'i=0; while [ "$i" -lt "$1" ]; do sleep "$2" & i=$((i+1)); done; wait'


class BenchError(Exception):
    pass


def die_with_parent():
    """In the child before exec: SIGKILL when this script dies, even by SIGKILL."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


class Group:
    """Processes started in their own session; all killed by group on exit."""

    def __init__(self):
        self.procs = []

    def start(self, args, **kw):
        p = subprocess.Popen(args, start_new_session=True, preexec_fn=die_with_parent, **kw)
        self.procs.append(p)
        return p

    def kill(self, p, sig=signal.SIGKILL):
        try:
            os.killpg(p.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    def kill_all(self):
        for p in reversed(self.procs):
            self.kill(p)
        for p in reversed(self.procs):
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                print(f"warning: pid {p.pid} did not exit", file=sys.stderr)
        self.procs.clear()


# ---------------------------------------------------------------- /proc reads


def children_of(pid):
    out = []
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                out.extend(int(c) for c in f.read().split())
    except FileNotFoundError:
        pass
    return out


def status_field(pid, name):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(name + ":"):
                return line.split()[1]
    raise BenchError(f"no {name} in /proc/{pid}/status")


def cpu_ticks(pid):
    """utime + stime of the whole process, in clock ticks."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


def thread_cpu_ns(pid):
    """CPU time of each live thread by name, in ns (schedstat), summed by name."""
    by_name = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/comm") as f:
                name = f.read().strip()
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                ns = int(f.read().split()[0])
        except (FileNotFoundError, ProcessLookupError):
            continue
        by_name[name] = by_name.get(name, 0) + ns
    return by_name


def load_average():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def host_processes():
    return sum(1 for d in os.listdir("/proc") if d.isdigit())


def memory_mib(pid):
    kib = lambda name: int(status_field(pid, name)) / 1024  # noqa: E731
    return kib("VmRSS"), kib("VmHWM")


# ------------------------------------------------------------------- scraping

LINE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)")
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def parse(text):
    """[(name, {labels}, value)] from exposition text."""
    out = []
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = LINE.match(line)
        if m:
            labels = dict(LABEL.findall(m.group(2) or ""))
            out.append((m.group(1), labels, float(m.group(3))))
    return out


def get(url, timeout=5.0):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.read().decode()


def scrape(url):
    return parse(get(url + "/metrics"))


def one(series, name):
    found = [v for n, _, v in series if n == name]
    if len(found) != 1:
        raise BenchError(f"expected one {name}, got {found}")
    return found[0]


def check_load(series, leaders, shape=BENCH):
    """Fails unless the scrape shows the 8 GPUs and the jobs as set up."""
    problems = []
    if one(series, "stallwatch_nvml_up") != 1:
        problems.append("stallwatch_nvml_up is not 1")
    up = [v for n, _, v in series if n == "stallwatch_gpu_up"]
    if up != [1.0] * GPUS:
        problems.append(f"stallwatch_gpu_up: {up}")
    procs = {int(l["pid"]): v for n, l, v in series if n == "stallwatch_job_processes"}
    want = {pid: float(shape.processes) for pid in leaders}
    if procs != want:
        problems.append(f"stallwatch_job_processes: {procs}, want {want}")
    threads = {}
    for n, l, v in series:
        if n == "stallwatch_job_threads":
            threads[int(l["pid"])] = threads.get(int(l["pid"]), 0) + v
    want = {pid: float(shape.total_threads) for pid in leaders}
    if threads != want:
        problems.append(f"stallwatch_job_threads (sum by job): {threads}, want {want}")
    tops = {int(l["pid"]) for n, l, _ in series if n == "stallwatch_job_top_thread_cpu_ratio"}
    if tops != set(leaders):
        problems.append(f"stallwatch_job_top_thread_cpu_ratio for {sorted(tops)}")
    if problems:
        raise BenchError("the scrape does not show the load:\n  " + "\n  ".join(problems))


def latency(port, n, headers):
    """Client-side /metrics latency over n sequential keep-alive scrapes."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    times, size, decoded = [], 0, 0
    try:
        for _ in range(n):
            start = time.perf_counter()
            conn.request("GET", "/metrics", headers=headers)
            r = conn.getresponse()
            body = r.read()
            times.append(time.perf_counter() - start)
            if r.status != 200:
                raise BenchError(f"/metrics answered {r.status}")
            size = len(body)
            encoding = r.getheader("Content-Encoding")
            decoded = len(gzip.decompress(body)) if encoding == "gzip" else size
    finally:
        conn.close()
    times.sort()
    return {
        "p50_ms": 1e3 * times[len(times) // 2],
        "p99_ms": 1e3 * times[min(len(times) - 1, int(len(times) * 0.99))],
        "mean_ms": 1e3 * statistics.fmean(times),
        "bytes": size,
        "decoded_bytes": decoded,
    }


# -------------------------------------------------------------------- set-up


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# What a GPU shows in each state: (utilization_gpu, utilization_memory,
# each process's sm_util, power in mW). None: the benchmarks' steady 50%.
# `busy`: a training job's GPU, fully used; `starved`: the GPU idle, its
# memory still held by the same processes (a job waiting for its input).
STATES = {
    None: (50, 20, 40, 200000),
    "busy": (100, 40, 95, 600000),
    "starved": (0, 0, 0, 90000),
}


def gpu(index, pids, state=None):
    """A stand-in GPU (tests/e2e/standin_gpu.py) held by the processes `pids`,
    in `state` (a key of STATES), its memory nearly full."""
    util, mem_util, sm_util, power = STATES[state]
    return standin_gpu.gpu(
        index,
        utilization_gpu=util,
        utilization_memory=mem_util,
        memory_used_bytes=75161927680,
        power_mw=power,
        processes=[
            {"pid": pid, "used_memory_bytes": 70 * 2**30 // len(pids), "sm_util": sm_util, "mem_util": mem_util // 2}
            for pid in pids
        ],
    )


def scenario(leaders, state=None):
    """The stand-in NVML scenario: GPUS GPUs, the jobs' leaders spread over
    them in turn (one each with 8 jobs; 8 each with 64; GPUs 1-7 idle with 1),
    every GPU in `state` (a key of STATES), or each in its own when `state`
    is a list of GPUS of them."""
    states = state if isinstance(state, list) else [state] * GPUS
    return {
        "driver_version": "550.54.15",
        "gpus": [gpu(i, leaders[i::GPUS], states[i]) for i in range(GPUS)],
    }


class Healthy:
    """GPUs as healthy training reads them: each GPU around its own mean of 85-99% busy, a dip
    to 40-75% about one sample in eight (an input wait, an optimizer step, a log line), and
    every 150-300 s a stretch of 20-60 s at 0% (an evaluation, a checkpoint), each GPU at its
    own phase. Seeded: the same walk every run."""

    def __init__(self, gpus, seed=44):
        self.rng = random.Random(seed)
        self.means = [self.rng.uniform(0.85, 0.99) for _ in range(gpus)]
        # (period, start of the idle stretch in it, its length), seconds.
        self.pauses = []
        for _ in range(gpus):
            period = self.rng.uniform(150, 300)
            self.pauses.append((period, self.rng.uniform(0, period), self.rng.uniform(20, 60)))

    def utilization(self, gpu, t):
        period, start, length = self.pauses[gpu]
        if (t - start) % period < length:
            return 0.0
        if self.rng.random() < 1 / 8:
            return self.rng.uniform(0.40, 0.75)
        mean = self.means[gpu]
        return min(0.99, max(0.85, self.rng.gauss(mean, 0.02)))

    def scenario(self, leaders, t):
        """The stand-in scenario at `t` seconds into the walk."""
        s = scenario(leaders, "busy")
        for i, g in enumerate(s["gpus"]):
            u = self.utilization(i, t)
            g["utilization_gpu"] = round(100 * u)
            g["power_mw"] = round(90000 + 510000 * u)
            for p in g["processes"]:
                p["sm_util"] = round(95 * u)
        return s


JOB_MARK = "stallwatch-bench-job-"  # + a number, last on each leader's command line
_job_numbers = itertools.count()


def start_jobs(group, life, count=GPUS, shape=BENCH):
    """Starts `count` jobs; returns their leaders' pids once all are set up.
    Each leader's command line ends in JOB_MARK and a number of its own."""
    leaders = []
    for _ in range(count):
        mark = f"{JOB_MARK}{next(_job_numbers)}"
        p = group.start(
            [sys.executable, "-c", JOB_CODE, str(shape.threads), str(shape.children), str(shape.child_threads), str(life), str(int(shape.busy)), mark],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        leaders.append(p)
    for p in leaders:
        if p.stdout.readline().strip() != b"ready":
            raise BenchError(f"job {p.pid} did not start")
    for p in leaders:
        threads = int(status_field(p.pid, "Threads"))
        kids = children_of(p.pid)
        if threads != shape.threads or len(kids) != shape.children:
            raise BenchError(f"job {p.pid}: {threads} threads, {len(kids)} children")
    return [p.pid for p in leaders]


class Unrelated:
    """A number of unrelated `sleep` processes, all in one process group."""

    def __init__(self, group, life):
        self.group, self.life = group, life
        self.sh, self.count = None, 0

    def set(self, count, timeout=180):
        if count == self.count:
            return
        if self.sh is not None:
            print(f"stopping {self.count} unrelated processes ...", flush=True)
            floor = host_processes() - self.count
            self.group.kill(self.sh)
            self.sh.wait(timeout=10)
            self.sh, self.count = None, 0
            deadline = time.monotonic() + 60
            while host_processes() > floor + 100 and time.monotonic() < deadline:
                time.sleep(0.2)  # until the killed ones are reaped
        if count > 0:
            print(f"starting {count} unrelated processes ...", flush=True)
            self.sh = self.group.start(["sh", "-c", UNRELATED_CODE, "sh", str(count), str(self.life)])
            deadline = time.monotonic() + timeout
            while len(children_of(self.sh.pid)) < count:
                if time.monotonic() > deadline or self.sh.poll() is not None:
                    running = len(children_of(self.sh.pid))
                    raise BenchError(f"only {running} of {count} unrelated processes started")
                time.sleep(0.2)
            self.count = count
        time.sleep(5)  # let the burst of forks or exits settle
