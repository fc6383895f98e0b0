"""Process churn against the stand-in NVML: real short-lived processes are
started and killed, and each is listed as a GPU process in the scenario file
while it lives. Standard library only (scripts/soak uses it too)."""

import json
import os
import random
import signal
import subprocess
import threading
import time

# Some jobs fork a child of their own, so jobs have descendants that come and go.
COMMANDS = (
    ["sleep", "30"],
    ["sleep", "30"],
    ["sh", "-c", "sleep 30 & wait"],
)


class Churn:
    """Starts `per_minute` processes a minute, each living `lifetime` seconds
    (a random span), on `gpus` GPUs. A killed process is reaped at once or, for
    one in `zombie_every`, a little later, so it is a zombie for a while; it
    leaves the scenario one write after its death, so the daemon also sees
    pids that NVML lists but /proc no longer has."""

    def __init__(self, write_scenario, gpus=1, per_minute=300, lifetime=(0.3, 3.0), zombie_every=5, seed=1):
        self.write_scenario = write_scenario
        self.gpus = gpus
        self.period = 60.0 / per_minute
        self.lifetime = lifetime
        self.zombie_every = zombie_every
        self.random = random.Random(seed)
        self.alive = {}  # pid -> (Popen, gpu, deadline)
        self.dead = []  # (Popen, reap at), killed but not yet reaped
        self.listed_gpus = {}  # pid -> GPU index, as last written to the scenario
        self.started = 0
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.thread = None

    def processes(self, gpu):
        """The scenario's process list for `gpu`: what was listed at the last write."""
        with self.lock:
            return [
                {"pid": pid, "used_memory_bytes": 256 * 2**20, "sm_util": 0}
                for pid, g in sorted(self.listed_gpus.items())
                if g == gpu
            ]

    def start(self):
        self.thread = threading.Thread(target=self.run, name="churn", daemon=True)
        self.thread.start()
        return self

    def run(self):
        next_start = time.monotonic()
        while not self.stopping.is_set():
            now = time.monotonic()
            changed = False
            if now >= next_start:
                self.spawn()
                next_start += self.period
                changed = True
            changed |= self.kill_expired(now)
            self.reap(now)
            if changed:
                self.publish()
            time.sleep(min(0.02, max(0.0, next_start - time.monotonic())))

    def spawn(self):
        command = self.random.choice(COMMANDS)
        process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        life = self.random.uniform(*self.lifetime)
        with self.lock:
            self.alive[process.pid] = (process, self.started % self.gpus, time.monotonic() + life)
            self.started += 1

    def kill_expired(self, now):
        expired = [pid for pid, (_, _, deadline) in self.alive.items() if deadline <= now]
        for pid in expired:
            process, _, _ = self.alive[pid]
            kill_tree(process)
            later = self.random.randrange(self.zombie_every) == 0
            self.dead.append((process, now + (0.5 if later else 0.0)))
            with self.lock:
                del self.alive[pid]
        return bool(expired)

    def reap(self, now):
        keep = []
        for process, at in self.dead:
            if at > now or process.poll() is None:
                if now > at + 2.0:
                    process.kill()  # a shell that did not end with its child
                keep.append((process, at))
        self.dead = keep

    def publish(self):
        with self.lock:
            self.listed_gpus = {pid: gpu for pid, (_, gpu, _) in self.alive.items()}
        self.write_scenario(self)

    def stop(self):
        """Kills and reaps every process it started; lists none."""
        self.stopping.set()
        if self.thread is not None:
            self.thread.join()
        for process, _, _ in self.alive.values():
            kill_tree(process)
        for process in [p for p, _, _ in self.alive.values()] + [p for p, _ in self.dead]:
            try:
                process.wait(timeout=2)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        self.alive.clear()
        self.dead.clear()
        self.listed_gpus = {}
        self.write_scenario(self)


def kill_tree(process):
    """SIGKILL the process, or its children when it has some: a `sh -c ... &
    wait` job then reaps its child and ends by itself, leaving no orphan."""
    try:
        with open(f"/proc/{process.pid}/task/{process.pid}/children") as f:
            children = [int(c) for c in f.read().split()]
    except OSError:
        children = []
    for pid in children or [process.pid]:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def write_json_atomically(path, value):
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(value))
    os.replace(tmp, path)
