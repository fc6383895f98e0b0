"""A training job whose input pipeline is a real PyTorch DataLoader (torch on
CPU), for the PyTorch scenarios. The "GPU" side is the simulator's: every
batch the loop runs a kernel of --step-kernel seconds on the GPU link
(gpu_link.py), so utilization emerges from how fast the DataLoader delivers,
and it prints "step N loss X" every --log-every-s (the progress signal).

Until --onset-s the loader serves ready tensors (num_workers=0, a GPU well
fed); from then on a DataLoader over a Dataset whose __getitem__ decodes a
JPEG with PIL (decode_image) and smooths it with a per-pixel Python loop
(smooth_pixels), with --workers worker processes (0: in the training process
itself, as PyTorch's default).

With --hang, the job hangs at the onset instead: `main`, its training loop
deadlocks on a lock another thread holds (GPU idle, CPU ~0, no output);
`worker`, the DataLoader's one worker process blocks forever in __getitem__
(wait_for_shard: a read of a shard that never completes) and the training
loop waits for its batch.

With --compile, the model is compiled at the onset instead: `once`, a real
torch.compile warm-up (Dynamo, then Inductor generating and building C++ for
the CPU; the GPU idles while one thread burns a core), then steps through
the compiled model; `recompile`, a model compiled with dynamic=False whose
input's length changes every few steps, so it recompiles at every new shape
(a recompilation storm).

`--prepare` writes the JPEGs into --data-dir (the orchestrator runs it before
the clock starts). Phase times (--onset-s, --log-every-s) are multiplied by
--time-scale; per-batch times are not. SIGTERM: releases the slot and exits 0.
`--measure SECONDS` prints the slow loader's batches per second and the GPU
utilization they would give, for sizing scenarios.
"""

import argparse
import math
import os
import random
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from gpu_link import run_job  # noqa: E402

GIB = 1 << 30
IMAGES, SIDE = 32, 256


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    a = p.add_argument
    a("--link", help="GPU link file (gpu_link.py); required unless --prepare or --measure")
    a("--gpu", type=int, default=0)
    a("--gpu-memory-gib", type=float, default=40.0)
    a("--time-scale", type=float, default=1.0)
    a("--data-dir", default="images")
    a("--onset-s", type=float, default=150.0, help="when the slow DataLoader takes over")
    a("--workers", type=int, default=0, help="DataLoader worker processes from the onset on")
    a("--batch-size", type=int, default=16)
    a("--loop-pixels", type=int, default=48, help="side of the square smooth_pixels walks in Python")
    a("--step-kernel", type=float, default=0.035, help="GPU seconds per batch")
    a("--hang", choices=("main", "worker"), help="hang at the onset instead (see above)")
    a("--compile", choices=("once", "recompile"), help="compile the model at the onset (see above)")
    a("--compile-cache", help="Inductor's cache directory (TORCHINDUCTOR_CACHE_DIR): a new one "
      "compiles cold, as a first run does, not from an earlier run's cache in /tmp")
    a("--log-every-s", type=float, default=5.0)
    a("--prepare", action="store_true", help="write the JPEGs and exit")
    a("--measure", type=float, help="time the slow loader for this many seconds and exit")
    return p.parse_args(argv)


def make_images(args):
    from PIL import Image
    os.makedirs(args.data_dir, exist_ok=True)
    rng = random.Random(7)
    for i in range(IMAGES):
        pixels = bytes(rng.randrange(256) for _ in range(48 * 48 * 3))
        image = Image.frombytes("RGB", (48, 48), pixels).resize((SIDE, SIDE), Image.BILINEAR)
        image.save(os.path.join(args.data_dir, f"{i:03d}.jpg"), quality=90)


# -- the user's dataset ---------------------------------------------------------
def smooth_pixels(pixels, side):
    """The user's helper: a per-pixel loop in Python (what vectorizing removes)."""
    total = 0
    for y in range(1, side - 1):
        row = pixels[y]
        for x in range(1, side - 1):
            total += (row[x - 1] + row[x] + row[x + 1]) // 3
    return total


def decode_image(path, side):
    """The user's decoding: PIL, then the helper."""
    from PIL import Image
    import numpy as np
    with Image.open(path) as image:
        gray = np.asarray(image.convert("L"), dtype=np.int32)
    smooth_pixels(gray[:side, :side].tolist(), side)
    return gray


def wait_for_shard():
    """The user's read of a shard that never completes (a dead NFS server, a lock
    another process never releases)."""
    import threading
    threading.Event().wait()


class JpegDataset:
    """A map-style dataset of the JPEGs (torch.utils.data.Dataset's protocol)."""

    def __init__(self, files, side, hang=False):
        self.files, self.side, self.hang = files, side, hang

    def __len__(self):
        return 1 << 30  # endless: the loop never ends an epoch

    def __getitem__(self, index):
        import torch
        if self.hang:
            wait_for_shard()
        image = decode_image(self.files[index % len(self.files)], self.side)
        return torch.from_numpy(image[:64, :64].copy())


def slow_loader(args):
    import torch.utils.data as data
    files = sorted(os.path.join(args.data_dir, f) for f in os.listdir(args.data_dir))
    return data.DataLoader(JpegDataset(files, args.loop_pixels, args.hang == "worker"),
                           batch_size=args.batch_size, num_workers=args.workers)


class Net:
    """The user's model: a small MLP over the batch's flattened images."""

    def __init__(self):
        import torch
        self.layers = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(),
                                          torch.nn.Linear(256, 10))

    def __call__(self, x):
        return self.layers(x.float()).sum()


def compiled_steps(args):
    """Batches through a compiled model: its first call compiles; with
    `recompile`, every 4th step a longer input (a new shape to compile for)."""
    if args.compile_cache:
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = args.compile_cache
    import torch
    torch._dynamo.config.cache_size_limit = 64
    model = torch.compile(Net(), dynamic=False if args.compile == "recompile" else None)
    step = 0
    while True:
        rows = 64 + 8 * (step // 4) if args.compile == "recompile" else 64
        with torch.no_grad():
            model(torch.zeros(rows, 64))
        step += 1
        yield None


def deadlock():
    """The user's bug: the loop waits for a lock a helper thread took and keeps."""
    import threading
    lock, taken = threading.Lock(), threading.Event()

    def keep_it():
        with lock:
            taken.set()
            threading.Event().wait()

    threading.Thread(target=keep_it, name="checkpointer", daemon=True).start()
    taken.wait()
    with lock:
        pass


def ready_batches(batch_size):
    import torch
    batch = torch.zeros(batch_size, 64, 64, dtype=torch.int32)
    while True:
        yield batch


# -- the job ---------------------------------------------------------------------
class Job:
    def __init__(self, args):
        self.args, self.step, self.last_log = args, 0, time.monotonic()

    def log(self, text):
        print(text, flush=True)
        self.last_log = time.monotonic()

    def run(self, slot, start):
        a = self.args
        onset = start + a.onset_s * a.time_scale
        batches = ready_batches(a.batch_size)
        self.log("start training: ready batches")
        while True:
            if onset is not None and time.monotonic() >= onset:
                onset = None
                if a.hang == "main":
                    self.log(f"step {self.step}: the training loop deadlocks")
                    deadlock()
                if a.compile:
                    self.log(f"step {self.step}: torch.compile ({a.compile})")
                    batches = compiled_steps(a)
                else:
                    batches = iter(slow_loader(a))
                self.log(f"step {self.step}: now the DataLoader with num_workers={a.workers}")
            next(batches)
            slot.run_kernel(a.step_kernel)
            self.step += 1
            if time.monotonic() - self.last_log >= a.log_every_s * a.time_scale:
                loss = 2.5 * math.exp(-self.step / 3000) + 0.05 + random.random() * 0.02
                self.log(f"step {self.step} loss {loss:.4f}")


def measure(args):
    batches = iter(slow_loader(args))
    next(batches)
    t0, n = time.monotonic(), 0
    while time.monotonic() - t0 < args.measure:
        next(batches)
        time.sleep(args.step_kernel)
        n += 1
    span = time.monotonic() - t0
    print(f"num_workers={args.workers}: {n / span:.1f} batches/s, "
          f"utilization {n * args.step_kernel / span:.2f}")


def main(argv=None):
    args = parse_args(argv)
    if args.prepare:
        make_images(args)
        return 0
    if args.measure:
        measure(args)
        return 0
    start = time.monotonic()

    def body(take):
        import torch  # noqa: F401  (the job takes its GPU once its framework is up)
        Job(args).run(take(args.gpu, int(args.gpu_memory_gib * GIB)), start)

    run_job(args.link, body)  # os._exit: DataLoader workers are daemonic, they go with the process

if __name__ == "__main__":
    main()
