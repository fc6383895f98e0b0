"""Runs and ranks of real torch.distributed jobs on CPU (torch from PyPI, the
gloo backend; tests/requirements-torch.txt, installed by
scripts/install-test-deps): started by the real torchrun, and by hand with
Slurm's variables as srun would. The daemon reads each worker's run and rank
from the environment the launcher gave it."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import torch  # noqa: F401 (the tests need the real package; its absence is an install error)

from daemon import free_port, gpu, kill_group
TORCH_RANK = Path(__file__).parent / "torch_rank.py"


def wait_pids(directory, count, procs, timeout=120):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        files = sorted(directory.glob("rank*.pid"))
        if len(files) == count:
            time.sleep(0.2)
            return {int(f.stem[4:]): int(f.read_text()) for f in files}
        for p in procs:
            assert p.poll() is None, f"a launcher exited with {p.returncode}"
        time.sleep(0.2)
    raise AssertionError(f"{count} ranks did not start within {timeout} s")


def test_ranks_of_a_real_torchrun_job(daemon_factory, tmp_path):
    """torchrun's own environment, as its workers get it: the run is its rendezvous id."""
    port = free_port()
    log = open(tmp_path / "torchrun.log", "w")
    launcher = subprocess.Popen(
        [str(Path(sys.executable).with_name("torchrun")), "--nnodes=1", "--nproc-per-node=2",
         "--rdzv-backend=c10d", f"--rdzv-endpoint=127.0.0.1:{port}", "--rdzv-id=llm-test-7",
         str(TORCH_RANK), str(tmp_path)],
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True, env=dict(os.environ, SLOW_RANK="1"))
    try:
        pids = wait_pids(tmp_path, 2, [launcher])
        d = daemon_factory({"gpus": [gpu(r, utilization_gpu=100 if r == 0 else 10,
                                         processes=[{"pid": pid, "used_memory_bytes": 2**30}])
                                     for r, pid in pids.items()]}).start()
        m = d.wait_for(lambda m: m.has("stallwatch_job_rank_info", pid=str(pids[1])), timeout=20, what="ranks")
        for rank, pid in pids.items():
            assert m.has("stallwatch_job_rank_info", gpu=str(rank), pid=str(pid), run="torchelastic:llm-test-7",
                         rank=str(rank), local_rank=str(rank), world_size="2", launcher="torchrun"), d.get("/metrics")[2]
        assert m.value("stallwatch_job_world_size", pid=str(pids[0])) == 2
        # The collective really runs: rank 0 waits for the slow rank 1 at each step.
        steps = (tmp_path / "torchrun.log").read_text().count("rank 0 step")
        time.sleep(1.5)
        more = (tmp_path / "torchrun.log").read_text().count("rank 0 step") - steps
        assert 1 <= more <= 8, more
    finally:
        kill_group(launcher)
        # torchrun starts its workers in sessions of their own: end them too.
        for f in tmp_path.glob("rank*.pid"):
            try:
                os.kill(int(f.read_text()), signal.SIGKILL)
            except (ProcessLookupError, ValueError):
                pass
        log.close()


def test_ranks_of_a_real_job_started_with_slurms_variables(daemon_factory, tmp_path):
    """Two ranks started by hand as srun would: Slurm's variables name the run and rank."""
    port = free_port()
    procs, logs = [], []
    try:
        for rank in range(2):
            log = open(tmp_path / f"rank{rank}.log", "w")
            env = dict(os.environ, SLURM_JOB_ID="90210", SLURM_STEP_ID="1", SLURM_PROCID=str(rank),
                       SLURM_LOCALID=str(rank), SLURM_NTASKS="2", SLURM_NODEID="0")
            procs.append(subprocess.Popen([sys.executable, str(TORCH_RANK), str(tmp_path), f"tcp://127.0.0.1:{port}"],
                                          stdout=log, stderr=subprocess.STDOUT, start_new_session=True, env=env))
            logs.append(log)
        pids = wait_pids(tmp_path, 2, procs)
        d = daemon_factory({"gpus": [gpu(r, processes=[{"pid": pid, "used_memory_bytes": 2**30}])
                                     for r, pid in pids.items()]}).start()
        m = d.wait_for(lambda m: m.has("stallwatch_job_rank_info", pid=str(pids[1])), timeout=20, what="ranks")
        for rank, pid in pids.items():
            assert m.has("stallwatch_job_rank_info", pid=str(pid), run="slurm:90210.1", rank=str(rank),
                         local_rank=str(rank), world_size="2", launcher="slurm")
    finally:
        for p in procs:
            kill_group(p)
        for log in logs:
            log.close()
