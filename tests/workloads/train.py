"""A simulated training job. The input pipeline does real work (pipeline.py);
the GPU loop takes a batch from the prefetch queue and runs a "kernel" on the
GPU link for --step-kernel seconds, so utilization follows the pipeline: busy
while a batch computes, idle while the loop waits for the next one.

All phase times (--onset-s, --*-after-s, --eval-*, --checkpoint-*, --log-every-s,
--startup-s) and the cache growth rate are multiplied by --time-scale; per-sample
and per-step times are not, so utilization patterns do not depend on the scale.
Stdout gets a "step N loss X" line every --log-every-s (the progress signal).
SIGTERM: releases the GPU slot and exits 0.
"""

import argparse
import math
import os
import random
import signal
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from gpu_link import GpuLink  # noqa: E402
from knobs import SWITCHABLE, Knobs, parse_value  # noqa: E402
from pipeline import Pipeline  # noqa: E402

GIB = 1 << 30
MIB = 1 << 20


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    a = p.add_argument
    a("--link", required=True, help="GPU link file (gpu_link.py)")
    a("--gpu", type=int, default=0)
    a("--gpu-memory-gib", type=float, default=40.0, help="GPU memory held from the start")
    a("--sm-share", type=float, default=1.0, help="share of the SMs a kernel uses")
    a("--time-scale", type=float, default=1.0)
    a("--step-kernel", type=float, default=0.08, help="GPU seconds per batch")
    a("--batch-size", type=int, default=32)
    a("--python-work-ms", type=float, default=0.0, help="GIL-bound Python CPU per sample")
    a("--sleep-ms", type=float, default=0.0, help="time.sleep per sample in the map")
    a("--read-bytes", type=int, default=0, help="blocking read per sample from --data-file")
    a("--data-file")
    a("--workers", type=int, default=1, help="parallel map workers (num_parallel_calls)")
    a("--worker-kind", choices=["thread", "process"], default="thread")
    a("--prefetch", type=int, default=2, help="batches queued for the GPU loop")
    a("--map-after-batch", action="store_true", help="per-sample work once per batch, one thread")
    a("--shard-samples", type=int, default=0, help="samples per shard (0: none)")
    a("--shard-open-ms", type=float, default=0.0, help="all workers wait this long per shard")
    a("--cache-grow-mib-per-s", type=float, default=0.0, help="in-RAM cache() growth")
    a("--cache-limit-mib", type=int, default=0, help="RAM cache size at which it stops growing")
    a("--spill-file", help="where the full cache spills (cache('/path'))")
    a("--spill-mib", type=int, default=64, help="spill file size (overwritten in a cycle)")
    a("--spill-mib-per-s", type=float, default=0.0)
    a("--log-every-s", type=float, default=10.0)
    a("--startup-s", type=float, default=5.0, help="model build before the first step")
    a("--onset-s", type=float, help="after this, the --then knobs apply")
    a("--then", action="append", default=[], metavar="KNOB=VALUE",
      help=f"knob after the onset, one of: {', '.join(SWITCHABLE)}")
    a("--deadlock-after-s", type=float, help="main loop then blocks forever on a lock")
    a("--spin-after-s", type=float, help="a kernel then spins forever (100%%, low power)")
    a("--exit-after-s", type=float, help="finish training and exit 0")
    a("--eval-every-s", type=float, default=0.0)
    a("--eval-s", type=float, default=0.0)
    a("--eval-kernel", type=float, default=0.03)
    a("--checkpoint-every-s", type=float, default=0.0)
    a("--checkpoint-s", type=float, default=0.0)
    a("--checkpoint-dir", default=".")
    a("--checkpoint-mib", type=int, default=16)
    a("--leave-child-holding", action="store_true",
      help="start a child that holds GPU memory and outlives this process")
    a("--child-memory-gib", type=float, default=1.0)
    a("--hold-only", action="store_true", help=argparse.SUPPRESS)
    return p.parse_args(argv)


def build_knobs(args, start):
    ts = args.time_scale
    before = {
        "python_work_ms": args.python_work_ms, "sleep_ms": args.sleep_ms,
        "read_bytes": args.read_bytes, "workers": args.workers,
        "map_after_batch": args.map_after_batch, "step_kernel": args.step_kernel,
        "shard_samples": args.shard_samples, "shard_open_ms": args.shard_open_ms,
        "cache_grow_mib_per_s": args.cache_grow_mib_per_s / ts,
        "spill_mib_per_s": args.spill_mib_per_s,
    }
    after = {}
    for item in args.then:
        name, _, value = item.partition("=")
        name = name.replace("-", "_")
        if name not in SWITCHABLE:
            raise SystemExit(f"--then: unknown knob {name!r}")
        after[name] = parse_value(name, value)
    if "cache_grow_mib_per_s" in after:
        after["cache_grow_mib_per_s"] /= ts
    if "workers" in after and after["workers"] > args.workers:
        raise SystemExit("--then workers=N: N must not exceed --workers")
    onset = start + args.onset_s * ts if args.onset_s is not None else None
    return Knobs(before, after, onset)


def hold_only(args, link):
    """The leftover child: holds GPU memory, never computes, sleeps until killed."""
    slot = link.register(os.getpid(), args.gpu, int(args.child_memory_gib * GIB))
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        while True:
            time.sleep(3600)
    finally:
        slot.release()


class Trainer:
    def __init__(self, args, link, start):
        self.args = args
        self.ts = args.time_scale
        self.start = start
        self.knobs = build_knobs(args, start)
        self.slot = link.register(os.getpid(), args.gpu, int(args.gpu_memory_gib * GIB), args.sm_share)
        self.step = 0
        self.last_log = start
        self.pipeline = Pipeline(self.knobs, args.batch_size, args.prefetch, args.workers,
                                 args.worker_kind, args.data_file, args.cache_limit_mib,
                                 args.spill_file, args.spill_mib)

    def at(self, seconds):
        return None if not seconds else self.start + seconds * self.ts

    def log(self, text):
        print(text, flush=True)
        self.last_log = time.monotonic()

    def loss(self):
        return 2.5 * math.exp(-self.step / 3000) + 0.05 + random.random() * 0.02

    def run(self):
        a = self.args
        time.sleep(a.startup_s * self.ts)  # building the model
        self.pipeline.start()
        self.log(f"start training: batch {a.batch_size}, {a.workers} {a.worker_kind} workers")
        deadlock, spin, finish = self.at(a.deadlock_after_s), self.at(a.spin_after_s), self.at(a.exit_after_s)
        next_eval, next_ckpt = self.at(a.eval_every_s), self.at(a.checkpoint_every_s)
        log_every = a.log_every_s * self.ts
        while True:
            now = time.monotonic()
            if finish and now >= finish:
                self.log(f"training finished at step {self.step}")
                return
            if deadlock and now >= deadlock:
                lock = threading.Lock()
                lock.acquire()
                lock.acquire()  # never returns: waits for itself
            if spin and now >= spin:
                self.slot.spin_forever(low_power=True)
            if next_eval and now >= next_eval:
                self.evaluate(a.eval_s * self.ts, log_every)
                next_eval = time.monotonic() + a.eval_every_s * self.ts
            if next_ckpt and now >= next_ckpt:
                self.checkpoint(a.checkpoint_s * self.ts, log_every)
                next_ckpt = time.monotonic() + a.checkpoint_every_s * self.ts
            batch = self.pipeline.get_batch(timeout=0.1)
            if batch is None:
                continue
            self.slot.run_kernel(self.knobs.now().step_kernel)
            self.step += 1
            if time.monotonic() - self.last_log >= log_every:
                self.log(f"step {self.step} loss {self.loss():.4f}")

    def evaluate(self, seconds, log_every):
        """Evaluation: short kernels on already-loaded data, host work in between."""
        end, n = time.monotonic() + seconds, 0
        while time.monotonic() < end:
            self.slot.run_kernel(self.args.eval_kernel)
            time.sleep(self.args.eval_kernel / 2)
            n += 1
            if time.monotonic() - self.last_log >= log_every:
                self.log(f"eval batch {n}")
        self.log(f"eval at step {self.step}: accuracy {0.9 - 0.5 * math.exp(-self.step / 3000):.4f}")

    def checkpoint(self, seconds, log_every):
        """Writes a real checkpoint file over `seconds` while the GPU idles."""
        path = os.path.join(self.args.checkpoint_dir, "checkpoint.bin")
        chunks = max(1, self.args.checkpoint_mib)
        data = os.urandom(MIB)
        self.log(f"saving checkpoint at step {self.step}")
        with open(path, "wb") as f:
            for i in range(chunks):
                f.write(data)
                time.sleep(seconds / chunks)
                if time.monotonic() - self.last_log >= log_every:
                    self.log(f"saving checkpoint: {100 * (i + 1) // chunks}%")
            f.flush()
            os.fsync(f.fileno())
        self.log(f"checkpoint saved: {path}")


def main(argv=None):
    args = parse_args(argv)
    link = GpuLink.attach(args.link)
    if args.hold_only:
        return hold_only(args, link)

    def on_term(*_):
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, on_term)
    start = time.monotonic()
    if args.leave_child_holding:
        child = [sys.executable, os.path.abspath(__file__), "--hold-only", "--link", args.link,
                 "--gpu", str(args.gpu), "--child-memory-gib", str(args.child_memory_gib)]
        subprocess.Popen(child, stdin=subprocess.DEVNULL)
    trainer = Trainer(args, link, start)
    try:
        trainer.run()
    finally:
        trainer.pipeline.close()
        trainer.slot.release()
    return 0


if __name__ == "__main__":
    sys.exit(main())
