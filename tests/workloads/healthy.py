"""Healthy training jobs with the rhythms of real ones, for the healthy soak
(scripts/soak-healthy). The "GPU" side is the simulator's (gpu_link.py): each
step runs a kernel on the GPU link; the rest is real PyTorch on the CPU.

--mode torch: one process training a small model with a real DataLoader.
  - warm-up: the first --warmup-steps kernels start 3x longer and shrink to
    their steady length (allocator growth, autotuning);
  - variable batch sizes (16 to 48 samples, as bucketed sequence lengths),
    the kernel's length in proportion;
  - epochs of --epoch-samples: the DataLoader's --workers worker processes
    end with the epoch and new ones start (persistent_workers=False), each
    running a worker_init_fn that opens its shards (about 1 s);
  - an evaluation pass (forward only, bigger batches, its own DataLoader and
    workers) every --eval-every-s;
  - a checkpoint (torch.save of the model, the optimizer and --checkpoint-mib
    of further state, written to a temporary file, fsynced and renamed) every
    --checkpoint-every-s; the GPU idles meanwhile;
  - logging whose cadence changes: a line every 5 s during the first 2 min,
    then every 20 s, then every 60 s after 30 min; epoch, evaluation and
    checkpoint lines whenever they happen.

--mode ddp: execs torchrun with --nproc-per-node ranks of --mode rank.
--mode rank: a rank of a data-parallel run (gloo, DistributedDataParallel):
  its stand-in GPU is --gpu plus LOCAL_RANK; each step a batch from a
  DataLoader over a DistributedSampler, a kernel whose length varies from
  step to step (log-normal, --jitter), then the gradients' all-reduce inside
  backward(), during which the GPU reads busy at low power as NCCL's waiting
  kernel does. Rank 0 logs every --log-every-s and checkpoints every
  --checkpoint-every-s while the other ranks wait at a barrier.

Phase times are multiplied by --time-scale; per-step times are not.
SIGTERM: releases the slot and exits 0.
"""

import argparse
import math
import os
import random
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from gpu_link import run_job  # noqa: E402
from pipeline import burn_cpu  # noqa: E402

GIB = 1 << 30
MIB = 1 << 20
SIDE = 32
BATCH_SIZES = (16, 24, 32, 48)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    a = p.add_argument
    a("--mode", choices=("torch", "ddp", "rank"), default="torch")
    a("--link", required=True, help="GPU link file (gpu_link.py)")
    a("--gpu", type=int, default=0, help="the GPU (ddp, rank: the first rank's)")
    a("--gpu-memory-gib", type=float, default=60.0)
    a("--time-scale", type=float, default=1.0)
    a("--workdir", default=".", help="where checkpoints go")
    a("--seed", type=int, default=1)
    a("--kernel-per-sample", type=float, default=0.004, help="GPU seconds per training sample")
    a("--item-cpu-ms", type=float, default=0.4, help="CPU per sample in __getitem__")
    a("--workers", type=int, default=2, help="DataLoader worker processes")
    a("--epoch-samples", type=int, default=40000)
    a("--warmup-steps", type=int, default=300)
    a("--eval-every-s", type=float, default=300.0)
    a("--eval-samples", type=int, default=6000)
    a("--checkpoint-every-s", type=float, default=420.0)
    a("--checkpoint-mib", type=int, default=192)
    # ddp and rank
    a("--nproc-per-node", type=int, default=2)
    a("--kernel-s", type=float, default=0.12, help="rank: median GPU seconds per step")
    a("--jitter", type=float, default=0.15, help="rank: sigma of the kernel's log-normal spread")
    a("--log-every-s", type=float, default=10.0, help="rank 0's logging interval")
    return p.parse_args(argv)


# -- the user's data --------------------------------------------------------------
class Samples:
    """A map-style dataset (torch.utils.data.Dataset's protocol): each sample is
    "decoded" with a little CPU work and a random augmentation."""

    def __init__(self, length, cpu_ms, seed):
        self.length, self.cpu_ms, self.seed = length, cpu_ms, seed

    def __len__(self):
        return self.length

    def __getitem__(self, index):
        import torch
        burn_cpu(self.cpu_ms)
        g = torch.Generator().manual_seed(self.seed * 1_000_003 + index)
        image = torch.rand(3, SIDE, SIDE, generator=g)
        if index % 2:
            image = image.flip(2)
        return image, index % 10


class VariableBatches:
    """Batches of varying size over a shuffled epoch (a batch_sampler)."""

    def __init__(self, length, seed):
        self.length, self.seed, self.epoch = length, seed, 0

    def __iter__(self):
        rng = random.Random(self.seed * 7919 + self.epoch)
        order = list(range(self.length))
        rng.shuffle(order)
        at = 0
        while at < self.length:
            size = rng.choice(BATCH_SIZES)
            yield order[at:at + size]
            at += size

    def __len__(self):
        return math.ceil(self.length / (sum(BATCH_SIZES) / len(BATCH_SIZES)))


def open_shards(worker_id):
    """worker_init_fn: each new worker opens its shards and reads their index."""
    time.sleep(0.8)
    burn_cpu(150)


class Model:
    def __init__(self, extra_mib):
        import torch
        self.net = torch.nn.Sequential(
            torch.nn.Flatten(), torch.nn.Linear(3 * SIDE * SIDE, 256), torch.nn.ReLU(),
            torch.nn.Linear(256, 10))
        self.optimizer = torch.optim.SGD(self.net.parameters(), lr=0.01, momentum=0.9)
        # Further state a checkpoint carries (EMA weights, scheduler, RNG, ...).
        self.extra = torch.zeros(extra_mib * MIB // 4)


def save_checkpoint(model, path, step):
    import torch
    tmp = f"{path}.tmp"
    with open(tmp, "wb") as f:
        torch.save({"step": step, "model": model.net.state_dict(),
                    "optimizer": model.optimizer.state_dict(), "extra": model.extra}, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


# -- one process ---------------------------------------------------------------------
class TorchJob:
    def __init__(self, args, slot):
        self.a, self.slot = args, slot
        self.ts = args.time_scale
        self.step = 0
        self.started = time.monotonic()
        self.last_log = self.started
        self.loss = 2.3

    def log(self, text):
        print(text, flush=True)
        self.last_log = time.monotonic()

    def log_interval(self):
        age = (time.monotonic() - self.started) / self.ts
        return (5.0 if age < 120 else 20.0 if age < 1800 else 60.0) * self.ts

    def kernel(self, samples, per_sample):
        warm = 1.0 + 2.0 * max(0.0, 1.0 - self.step / max(1, self.a.warmup_steps))
        self.slot.run_kernel(samples * per_sample * warm)

    def train_step(self, images, labels):
        import torch
        out = self.model.net(images)
        loss = torch.nn.functional.cross_entropy(out, labels)
        self.model.optimizer.zero_grad()
        loss.backward()
        self.model.optimizer.step()
        self.kernel(len(labels), self.a.kernel_per_sample)
        self.loss = 0.98 * self.loss + 0.02 * loss.item()
        self.step += 1

    def evaluate(self, epoch):
        import torch
        from torch.utils.data import DataLoader
        a = self.a
        loader = DataLoader(Samples(a.eval_samples, a.item_cpu_ms, a.seed + 1000), batch_size=64,
                            num_workers=a.workers, worker_init_fn=open_shards)
        self.model.net.eval()
        correct = total = 0
        t0 = time.monotonic()
        with torch.no_grad():
            for images, labels in loader:
                out = self.model.net(images)
                correct += int((out.argmax(1) == labels).sum())
                total += len(labels)
                self.kernel(len(labels), a.kernel_per_sample / 3)  # forward only
        self.model.net.train()
        self.log(f"eval epoch {epoch} step {self.step}: accuracy {correct / max(1, total):.4f} "
                 f"({total} samples, {time.monotonic() - t0:.1f}s)")

    def run(self):
        import torch
        from torch.utils.data import DataLoader
        a = self.a
        torch.set_num_threads(1)
        self.model = Model(a.checkpoint_mib)
        sampler = VariableBatches(a.epoch_samples, a.seed)
        loader = DataLoader(Samples(a.epoch_samples, a.item_cpu_ms, a.seed), batch_sampler=sampler,
                            num_workers=a.workers, worker_init_fn=open_shards,
                            persistent_workers=False)
        next_eval = self.started + a.eval_every_s * self.ts
        next_ckpt = self.started + a.checkpoint_every_s * self.ts
        self.log(f"training: {a.epoch_samples} samples an epoch, {a.workers} workers")
        epoch = 0
        while True:
            sampler.epoch = epoch
            t0, seen = time.monotonic(), 0
            for images, labels in loader:
                self.train_step(images, labels)
                seen += len(labels)
                now = time.monotonic()
                if now - self.last_log >= self.log_interval():
                    self.log(f"epoch {epoch} step {self.step} loss {self.loss:.4f}")
                if now >= next_eval:
                    self.evaluate(epoch)
                    next_eval = time.monotonic() + a.eval_every_s * self.ts
                if now >= next_ckpt:
                    t1 = time.monotonic()
                    save_checkpoint(self.model, os.path.join(a.workdir, "checkpoint.pt"), self.step)
                    self.log(f"saved checkpoint at step {self.step} ({time.monotonic() - t1:.1f}s)")
                    next_ckpt = time.monotonic() + a.checkpoint_every_s * self.ts
            self.log(f"epoch {epoch} done: {seen} samples in {time.monotonic() - t0:.0f}s")
            epoch += 1


# -- a data-parallel run ------------------------------------------------------------
def run_rank(args, slot, rank):
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel
    from torch.utils.data import DataLoader, DistributedSampler
    torch.set_num_threads(1)
    model = Model(args.checkpoint_mib if rank == 0 else 0)
    ddp = DistributedDataParallel(model.net)
    data = Samples(1 << 20, args.item_cpu_ms, args.seed)
    sampler = DistributedSampler(data, shuffle=True, seed=args.seed)
    loader = DataLoader(data, batch_size=16, sampler=sampler, num_workers=1,
                        worker_init_fn=open_shards, persistent_workers=False)
    rng = random.Random(args.seed * 31 + rank)
    ts = args.time_scale
    next_ckpt = time.monotonic() + args.checkpoint_every_s * ts
    last_log, step, smooth = time.monotonic(), 0, 2.3
    for epoch in range(1 << 30):
        sampler.set_epoch(epoch)
        for images, labels in loader:
            out = ddp(images)
            loss = torch.nn.functional.cross_entropy(out, labels)
            model.optimizer.zero_grad()
            slot.run_kernel(args.kernel_s * math.exp(rng.gauss(0.0, args.jitter)))
            slot.begin(low_power=True)  # the gradients' all-reduce: a waiting kernel
            loss.backward()
            slot.end()
            model.optimizer.step()
            smooth = 0.98 * smooth + 0.02 * loss.item()
            step += 1
            now = time.monotonic()
            if rank == 0 and now - last_log >= args.log_every_s * ts:
                print(f"step {step} loss {smooth:.4f}", flush=True)
                last_log = now
            # Every rank counts the same time from its own start: agree on when.
            due = torch.tensor([1.0 if now >= next_ckpt else 0.0])
            dist.all_reduce(due, op=dist.ReduceOp.MAX)
            if due.item():
                slot.begin(low_power=True)  # the others wait at the barrier
                if rank == 0:
                    t1 = time.monotonic()
                    save_checkpoint(model, os.path.join(args.workdir, "ddp-checkpoint.pt"), step)
                    print(f"saved checkpoint at step {step} ({time.monotonic() - t1:.1f}s)", flush=True)
                dist.barrier()
                slot.end()
                next_ckpt = time.monotonic() + args.checkpoint_every_s * ts


def main(argv=None):
    args = parse_args(argv)
    if args.mode == "ddp":
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
               f"--nproc-per-node={args.nproc_per_node}", os.path.abspath(__file__),
               *(argv if argv is not None else sys.argv[1:]), "--mode", "rank"]
        os.execv(sys.executable, cmd)

    def body(take):
        import torch  # noqa: F401  (the job takes its GPU once its framework is up)
        memory = int(args.gpu_memory_gib * GIB)
        if args.mode == "rank":
            import torch.distributed as dist
            dist.init_process_group("gloo")
            rank = dist.get_rank()
            run_rank(args, take(args.gpu + int(os.environ.get("LOCAL_RANK", rank)), memory), rank)
        else:
            TorchJob(args, take(args.gpu, memory)).run()

    run_job(args.link, body)


if __name__ == "__main__":
    main()
