"""A Debian root booted with `systemd-nspawn --boot`: systemd is PID 1 in the
container, and commands run inside it through nsenter.

How it is started on machines like CI's (no systemd on the host, the host's
/sys/fs/cgroup a hybrid v1 layout):
- `--register=no --keep-unit`: no systemd-machined or system bus on the host
  to register with or to create a scope.
- `SYSTEMD_NSPAWN_UNIFIED_HIERARCHY=1`: the container gets a cgroup v2 tree,
  so its systemd enforces device rules (DevicePolicy=, DeviceAllow=) with BPF
  programs, which need `--capability=CAP_BPF,CAP_NET_ADMIN` and
  `--system-call-filter=bpf`. `CAP_SYSLOG`, which nspawn leaves out of a
  container's set by default, is given back: a booted host has it, and the
  unit asks for it (the kernel log). The memory and pids controllers stay bound to
  the host's v1 hierarchies, so MemoryMax= and TasksMax= are accepted but not
  enforced in the container.
- `--volatile=overlay`: the cached root stays untouched, under a tmpfs overlay
  that holds every change and goes with the container (`--ephemeral` copies
  and then deletes the whole tree, 10 s or more each way on a busy disk).
- `--private-network`: only a loopback of its own, so the daemon's default
  port (9847) cannot clash with anything on the host.
- `NSPAWN_DEBUG_ARGS`: more systemd-nspawn options for a debugging run, such
  as `--bind=/tmp/journal:/var/log/journal` to keep the container's journal.
- its own cgroup: with --keep-unit, nspawn puts the container's processes in
  `payload` under the cgroup it runs in, which without systemd on the host is
  the root; a cgroup per container keeps two test runs at once apart.
"""

import os
import signal
import subprocess
import time
from pathlib import Path


def cgroup2_dir():
    """This process's cgroup in the cgroup v2 hierarchy, or None."""
    mount = None
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields = line.split(" - ")
        if len(fields) == 2 and fields[1].split()[0] == "cgroup2":
            mount = fields[0].split()[4]
            break
    own = [l[3:] for l in Path("/proc/self/cgroup").read_text().splitlines() if l.startswith("0::")]
    if mount is None or not own:
        return None
    return Path(mount) / own[0].lstrip("/")


class Container:
    def __init__(self, root, log_path):
        self.root = Path(root)
        self.name = f"stallwatch-test-{os.getpid()}"
        self.log_path = log_path
        self.process = None
        self.leader = None
        self.cgroup = None

    def _enter_own_cgroup(self):
        # Runs in the child, before systemd-nspawn starts.
        if self.cgroup is not None:
            (self.cgroup / "cgroup.procs").write_text("0")

    def boot(self, timeout=90):
        env = dict(os.environ, SYSTEMD_NSPAWN_UNIFIED_HIERARCHY="1")
        parent = cgroup2_dir()
        if parent is not None:
            try:
                self.cgroup = parent / self.name
                self.cgroup.mkdir()
            except OSError:
                self.cgroup = None
        self.log = open(self.log_path, "wb")
        self.process = subprocess.Popen(
            [
                "systemd-nspawn",
                f"--directory={self.root}",
                "--volatile=overlay",
                "--boot",
                f"--machine={self.name}",
                "--register=no",
                "--keep-unit",
                "--private-network",
                "--console=pipe",
                "--capability=CAP_BPF,CAP_NET_ADMIN,CAP_SYSLOG",
                "--system-call-filter=bpf",
                *os.environ.get("NSPAWN_DEBUG_ARGS", "").split(),
            ],
            stdin=subprocess.DEVNULL,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
            preexec_fn=self._enter_own_cgroup,
        )
        deadline = time.monotonic() + timeout
        while self.leader is None:
            self._check_alive()
            self.leader = self._container_init()
            if self.leader is None:
                assert time.monotonic() < deadline, f"no container init after {timeout}s: {self.console()}"
                time.sleep(0.1)
        state = ""
        while time.monotonic() < deadline:
            self._check_alive()
            # Fails while systemd inside has not opened its private socket yet.
            state = self.run("systemctl", "is-system-running", "--wait", check=False, timeout=timeout).stdout.strip()
            if state in ("running", "degraded"):
                break
            time.sleep(0.2)
        failed = self.run("systemctl", "--failed", "--no-legend", "--plain").stdout
        assert state == "running", f"boot ended {state!r}; failed units:\n{failed}\n{self.console()}"
        return self

    def _container_init(self):
        """nspawn's child that is PID 1 of a PID namespace of its own (before
        that, nspawn's children are its own helper processes)."""
        children = Path(f"/proc/{self.process.pid}/task/{self.process.pid}/children")
        for pid in children.read_text().split() if children.exists() else []:
            try:
                status = Path(f"/proc/{pid}/status").read_text()
            except OSError:
                continue
            nspid = [l.split()[1:] for l in status.splitlines() if l.startswith("NSpid:")]
            if nspid and len(nspid[0]) == 2 and nspid[0][1] == "1":
                return int(pid)
        return None

    def _check_alive(self):
        if self.process.poll() is not None:
            raise AssertionError(f"systemd-nspawn exited with {self.process.returncode}: {self.console()}")

    def console(self):
        return Path(self.log_path).read_text(errors="replace")[-4000:]

    def run(self, *command, check=True, timeout=60, input=None, namespaces=("--all",)):
        """Runs `command` in the container's namespaces (root directory,
        PIDs, mounts, cgroups, network)."""
        result = subprocess.run(
            ["nsenter", f"--target={self.leader}", *namespaces, "--", *command],
            capture_output=True,
            text=True,
            timeout=timeout,
            input=input,
        )
        if check:
            assert result.returncode == 0, f"{command} exited {result.returncode}:\n{result.stdout}\n{result.stderr}"
        return result

    def sh(self, script, **kwargs):
        return self.run("sh", "-c", script, **kwargs).stdout

    def http(self, path, port=9847):
        """(status, body) of GET http://127.0.0.1:port/path inside the container,
        by the host's curl in the container's network namespace only."""
        result = self.run(
            "curl", "-sS", "-m", "5", "-w", "\n%{http_code}", f"http://127.0.0.1:{port}{path}",
            check=False, namespaces=("--net",),
        )
        if result.returncode != 0:
            return None, result.stderr
        body, _, status = result.stdout.rpartition("\n")
        return int(status), body

    def path(self, inside):
        """The host path of a file inside the container, through its init's root."""
        return Path(f"/proc/{self.leader}/root") / inside.lstrip("/")

    def stop(self, timeout=30):
        if self.process is None or self.process.poll() is not None:
            return
        # SIGTERM makes nspawn ask the container's systemd to power off.
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()
        self.log.close()
        if self.cgroup is not None:
            # Empty by now: nspawn's payload and supervisor cgroups, then ours.
            for d in sorted(self.cgroup.rglob("*"), key=lambda p: len(p.parts), reverse=True):
                if d.is_dir():
                    d.rmdir()
            self.cgroup.rmdir()
