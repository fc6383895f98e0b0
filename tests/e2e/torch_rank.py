"""A rank of a real torch.distributed job on CPU (the gloo backend): started by
torchrun (which sets RANK, WORLD_SIZE, MASTER_ADDR, TORCHELASTIC_RUN_ID, ...)
or by hand with Slurm's variables, as srun would (SLURM_PROCID, SLURM_NTASKS;
the rendezvous address passed on the command line). It writes its pid to
`<dir>/rank<N>.pid` once the process group is up, then trains: a batch from a
real DataLoader (in the main process, as `num_workers=0`), a "kernel", and an
all-reduce of a tensor with the other ranks, printing a line a step.

    torch_rank.py DIR [tcp://HOST:PORT]

Environment:
- SLOW_RANK: that rank sleeps 0.3 s before each step (a slow input pipeline).
- GPU_LINK, GPU_INDEX: drive that stand-in GPU (tests/workloads/gpu_link.py) from
  what the rank does: busy while its kernel runs; busy at low power while it waits
  in the all-reduce, as NCCL's waiting kernel reads; idle while it loads a batch.
  When a peer is gone (gloo raises), the rank goes on waiting as an NCCL rank would
  until its watchdog: its GPU spins at low power and it prints nothing.
- The file `<dir>/rank<N>.mode`, read before each batch, changes how the rank loads
  its samples from then on: `normal` (1.5 ms of Python CPU work per sample),
  `slow_input` (each sample waits 0.3 s, as on slow storage, and decodes for 30 ms),
  `pinned` (each sample burns 0.25 s of Python CPU: one thread at 100%), `stuck` (a
  read that never returns, as a CUDA call on a GPU that fell off the bus).
"""

import os
import sys
import threading
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, Dataset

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "workloads"))
from pipeline import burn_cpu  # noqa: E402

KERNEL_S = 0.1
BATCH = 8


class Samples(Dataset):
    """Samples whose loading does what the mode file says."""

    def __init__(self, mode_path):
        self.mode_path = mode_path
        self.mode = "normal"

    def refresh(self):
        try:
            self.mode = self.mode_path.read_text().strip() or "normal"
        except OSError:
            self.mode = "normal"

    def __len__(self):
        return 1 << 30

    def __getitem__(self, index):
        if self.mode == "slow_input":
            burn_cpu(30)
            time.sleep(0.3)
        elif self.mode == "pinned":
            burn_cpu(250)
        elif self.mode == "stuck":
            threading.Event().wait()
        else:
            burn_cpu(1.5)
        return torch.full((16,), float(index % 7))


class NoGpu:
    def run_kernel(self, seconds):
        time.sleep(seconds)

    def begin(self, low_power=False):
        pass

    def end(self):
        pass

    def spin_forever(self, low_power=True):
        threading.Event().wait()


def gpu_slot():
    path = os.environ.get("GPU_LINK")
    if not path:
        return NoGpu()
    from gpu_link import GpuLink

    return GpuLink.attach(path).register(os.getpid(), int(os.environ.get("GPU_INDEX", "0")), 2 << 30)


def main():
    out = Path(sys.argv[1])
    if len(sys.argv) > 2:
        rank, world = int(os.environ["SLURM_PROCID"]), int(os.environ["SLURM_NTASKS"])
        dist.init_process_group("gloo", init_method=sys.argv[2], rank=rank, world_size=world)
    else:
        dist.init_process_group("gloo")
    rank = dist.get_rank()
    slot = gpu_slot()
    (out / f"rank{rank}.pid").write_text(str(os.getpid()))
    slow = int(os.environ.get("SLOW_RANK", "-1"))
    samples = Samples(out / f"rank{rank}.mode")
    batches = iter(DataLoader(samples, batch_size=BATCH, num_workers=0))
    t = torch.ones(4096)
    step = 0
    while True:
        if rank == slow:
            time.sleep(0.3)
        samples.refresh()
        next(batches)  # the rank waits for its data here
        slot.run_kernel(KERNEL_S)
        slot.begin(low_power=True)
        try:
            dist.all_reduce(t)
        except RuntimeError as e:
            print(f"rank {rank}: collective failed ({e}); waiting as NCCL would", flush=True)
            slot.spin_forever(low_power=True)
        slot.end()
        t.fill_(1.0)
        step += 1
        print(f"rank {rank} step {step}", flush=True)


if __name__ == "__main__":
    main()
