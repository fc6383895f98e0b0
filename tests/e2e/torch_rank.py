"""A rank of a real torch.distributed job on CPU (the gloo backend), for the
tests of run and rank identity: started by torchrun (which sets RANK,
WORLD_SIZE, MASTER_ADDR, TORCHELASTIC_RUN_ID, ...) or by hand with Slurm's
variables, as srun would (SLURM_PROCID, SLURM_NTASKS; the rendezvous address
passed on the command line). It writes its pid to `<dir>/rank<N>.pid` once
the process group is up, then all-reduces a tensor in a loop, printing a
line a step; rank SLOW_RANK sleeps 0.3 s before each step (a slow input
pipeline), so the others wait for it inside the collective.

    torch_rank.py DIR [tcp://HOST:PORT]
"""

import os
import sys
import time

import torch
import torch.distributed as dist


def main():
    out = sys.argv[1]
    if len(sys.argv) > 2:
        rank, world = int(os.environ["SLURM_PROCID"]), int(os.environ["SLURM_NTASKS"])
        dist.init_process_group("gloo", init_method=sys.argv[2], rank=rank, world_size=world)
    else:
        dist.init_process_group("gloo")
    rank = dist.get_rank()
    with open(os.path.join(out, f"rank{rank}.pid"), "w") as f:
        f.write(str(os.getpid()))
    slow = int(os.environ.get("SLOW_RANK", "-1"))
    t = torch.ones(4096)
    while True:
        if rank == slow:
            time.sleep(0.3)
        dist.all_reduce(t)
        t.fill_(1.0)
        print(f"rank {rank} step", flush=True)


if __name__ == "__main__":
    main()
