"""Per-job cgroups for scenarios that need the kernel to limit a job: a memory
limit (host memory pressure without endangering the host), a read/write
bandwidth limit on the data file's disk (storage waits a thread spends in D
state) and a CPU quota (a container's CPU limit). cgroup v1
(`/sys/fs/cgroup/{memory,blkio,cpu}`) and v2 (`memory.max`, `io.max`, `cpu.max`)
are both tried; `available()` says why not when neither works. Groups are made
below the caller's own cgroup and removed by `remove()`."""

import os
import time

ROOT = "/sys/fs/cgroup"


def _own_path(controller):
    """The caller's cgroup path for a v1 controller, or the v2 path ("" key)."""
    with open("/proc/self/cgroup") as f:
        for line in f:
            _, controllers, path = line.rstrip("\n").split(":", 2)
            if controller in controllers.split(",") or (controller == "" and controllers == ""):
                return path
    return None


def _writable_dir(path):
    return os.path.isdir(path) and os.access(path, os.W_OK)


def _v1_base(controller):
    mount = os.path.join(ROOT, controller)
    own = _own_path(controller)
    if own is None or not _writable_dir(mount):
        return None
    base = os.path.join(mount, own.lstrip("/"))
    return base if _writable_dir(base) else mount


def _v2_base(controller):
    if not os.path.exists(os.path.join(ROOT, "cgroup.controllers")):
        return None
    own = _own_path("")
    base = os.path.join(ROOT, (own or "/").lstrip("/"))
    try:
        with open(os.path.join(base, "cgroup.subtree_control")) as f:
            enabled = f.read().split()
    except OSError:
        return None
    want = {"memory": "memory", "blkio": "io", "cpu": "cpu"}[controller]
    return base if want in enabled and _writable_dir(base) else None


def block_device(path):
    """`major:minor` of the whole disk holding `path`, or None (tmpfs, overlay)."""
    dev = os.stat(path).st_dev
    major, minor = os.major(dev), os.minor(dev)
    sys_dev = f"/sys/dev/block/{major}:{minor}"
    if major == 0 or not os.path.exists(sys_dev):
        return None
    if os.path.exists(os.path.join(sys_dev, "partition")):
        with open(os.path.join(sys_dev, "..", "dev")) as f:
            return f.read().strip()
    return f"{major}:{minor}"


def available(controller, data_path=None):
    """None if a group with this controller can be made here, else the reason."""
    if controller == "blkio" and data_path is not None and block_device(data_path) is None:
        return f"{data_path} is not on a block device, so reads cannot be throttled"
    if _v1_base(controller) or _v2_base(controller):
        return None
    return f"no writable {controller} cgroup under {ROOT} (need root and a delegated hierarchy)"


class Group:
    """One cgroup for one job: create, set limits, add pids, remove."""

    def __init__(self, controller, name):
        self.controller = controller
        base = _v1_base(controller)
        self.v2 = base is None
        if self.v2:
            base = _v2_base(controller)
        if base is None:
            raise OSError(available(controller))
        self.path = os.path.join(base, name)
        os.makedirs(self.path, exist_ok=True)

    def _write(self, name, value):
        with open(os.path.join(self.path, name), "w") as f:
            f.write(str(value))

    def limit_memory(self, limit_bytes):
        self._write("memory.max" if self.v2 else "memory.limit_in_bytes", limit_bytes)

    def limit_cpu(self, cores, period_us=100_000):
        """A CFS quota: at most `cores` of CPU time per period, over all the group's threads."""
        quota = max(1000, int(cores * period_us))
        if self.v2:
            self._write("cpu.max", f"{quota} {period_us}")
        else:
            self._write("cpu.cfs_period_us", period_us)
            self._write("cpu.cfs_quota_us", quota)

    def limit_io(self, device, read_bps=None, write_bps=None):
        if self.v2:
            parts = [f"rbps={int(read_bps)}" if read_bps else "", f"wbps={int(write_bps)}" if write_bps else ""]
            self._write("io.max", f"{device} {' '.join(p for p in parts if p)}")
            return
        if read_bps:
            self._write("blkio.throttle.read_bps_device", f"{device} {int(read_bps)}")
        if write_bps:
            self._write("blkio.throttle.write_bps_device", f"{device} {int(write_bps)}")

    def memory_events(self):
        """The memory group's limit hits and OOM kills so far, as text ("" if unknown)."""
        name = "memory.events" if self.v2 else "memory.oom_control"
        try:
            with open(os.path.join(self.path, name)) as f:
                fields = dict(line.split() for line in f if len(line.split()) == 2)
        except (OSError, ValueError):
            return ""
        if not self.v2:
            try:
                with open(os.path.join(self.path, "memory.failcnt")) as f:
                    fields["failcnt"] = f.read().strip()
            except OSError:
                pass
        keep = ("max", "oom", "oom_kill", "failcnt", "under_oom")
        return " ".join(f"{k}={v}" for k, v in fields.items() if k in keep)

    def add(self, pid):
        self._write("cgroup.procs", pid)

    def remove(self, timeout=3.0):
        deadline = time.monotonic() + timeout
        while True:
            try:
                os.rmdir(self.path)
                return True
            except FileNotFoundError:
                return True
            except OSError:
                if time.monotonic() > deadline:
                    return False
                time.sleep(0.05)
