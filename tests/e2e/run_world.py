"""A small fleet whose GPUs are driven by real distributed jobs: hosts (stallwatch
daemons, fleet_hosts.Hosts), each with a GPU link file (tests/workloads/gpu_link.py)
that the ranks on it write and a meter (gpu_meter.py) turns into its stand-in NVML
state five times a second; runs of real torch.distributed ranks (torch_rank.py, the
gloo backend on CPU, started with Slurm's variables as srun would) placed on the
hosts' GPUs. A rank's GPU reads what the rank does: busy while its kernel runs, busy
at low power while it waits in the all-reduce, idle while it loads a batch."""

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from daemon import free_port, gpu, kill_group
from fleet_hosts import Hosts

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "workloads"))
from gpu_link import GpuLink  # noqa: E402
from gpu_meter import GpuMeter, GpuSpec  # noqa: E402

TORCH_RANK = Path(__file__).parent / "torch_rank.py"
GPUS = 2
UUID = "GPU-host{host}-{gpu}"


class Rank:
    def __init__(self, run, rank, host, gpu_index, popen, log, workdir):
        self.run, self.rank, self.host, self.gpu = run, rank, host, gpu_index
        self.popen, self.log, self.workdir = popen, log, workdir

    @property
    def pid(self):
        return int((self.workdir / f"rank{self.rank}.pid").read_text())

    def mode(self, mode):
        """How the rank loads its samples from its next batch on (torch_rank.py)."""
        tmp = self.workdir / f"rank{self.rank}.mode.tmp"
        tmp.write_text(mode)
        os.replace(tmp, self.workdir / f"rank{self.rank}.mode")

    def steps(self):
        return (self.workdir / f"rank{self.rank}.log").read_text(errors="replace").count(" step ")


class World:
    """`hosts` daemons on 127.0.0.2.., each with GPUS GPUs driven by the ranks on them."""

    def __init__(self, daemon_factory, tmp_path, hosts, config):
        self.tmp = tmp_path
        self.hosts = Hosts(daemon_factory, hosts, config=config, uuid=UUID)
        self.links, self.meters = [], []
        for i in range(hosts):
            link = GpuLink.create(str(tmp_path / f"host{i}.link"))
            self.links.append(link)
            self.meters.append(GpuMeter(link, [GpuSpec() for _ in range(GPUS)]))
        # Per host and GPU, scenario fields laid over the meter's (a fault, a lost GPU).
        self.overrides = [dict() for _ in range(hosts)]
        self.ranks = []
        self.errors = []
        # Called at stop, once the ranks are gone (a cgroup a rank was put in).
        self.cleanups = []
        self._stop = threading.Event()
        self.tick()
        self._thread = threading.Thread(target=self._loop, name="world_tick", daemon=True)
        self._thread.start()

    @property
    def daemons(self):
        return self.hosts.daemons

    def tick(self):
        for i, (d, meter) in enumerate(zip(self.daemons, self.meters)):
            gpus = []
            for index, frame in enumerate(meter.frame()):
                g = gpu(index, uuid=UUID.format(host=i, gpu=index), **frame["nvml"])
                g.update(self.overrides[i].get(index, {}))
                gpus.append(g)
            d.set_scenario({"gpus": gpus})

    def _loop(self):
        while not self._stop.wait(0.2):
            try:
                self.tick()
            except Exception as e:  # keep ticking; the test reports errors
                self.errors.append(repr(e))

    def start_run(self, job_id, placement):
        """Starts a run of len(placement) ranks, rank r on placement[r] = (host, gpu), with
        Slurm's variables (run `slurm:<job_id>.0`); returns its ranks once all are up."""
        workdir = self.tmp / f"run{job_id}"
        workdir.mkdir()
        port = free_port()
        ranks = []
        for r, (host, index) in enumerate(placement):
            env = dict(os.environ, SLURM_JOB_ID=str(job_id), SLURM_STEP_ID="0", SLURM_PROCID=str(r),
                       SLURM_LOCALID=str(index), SLURM_NTASKS=str(len(placement)), SLURM_NODEID=str(host),
                       GPU_LINK=self.links[host].path, GPU_INDEX=str(index),
                       OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
            log = open(workdir / f"rank{r}.log", "w")
            p = subprocess.Popen([sys.executable, str(TORCH_RANK), str(workdir), f"tcp://127.0.0.1:{port}"],
                                 env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
            ranks.append(Rank(f"slurm:{job_id}.0", r, host, index, p, log, workdir))
        self.ranks += ranks
        deadline = time.monotonic() + 180
        while not all((workdir / f"rank{r}.pid").exists() for r in range(len(placement))):
            for k in ranks:
                if k.popen.poll() is not None:
                    raise AssertionError(f"rank {k.rank} exited with {k.popen.returncode}: "
                                         + (workdir / f"rank{k.rank}.log").read_text()[-2000:])
            if time.monotonic() > deadline:
                raise AssertionError(f"run {job_id}: ranks not up within 180 s")
            time.sleep(0.2)
        return ranks

    def stop(self):
        self._stop.set()
        self._thread.join(timeout=5)
        for k in self.ranks:
            try:
                os.kill(k.popen.pid, signal.SIGCONT)  # a stopped rank dies too
            except ProcessLookupError:
                pass
            kill_group(k.popen)
            k.log.close()
        for link in self.links:
            link.close()
        for cleanup in self.cleanups:
            cleanup()

