"""A training job whose input pipeline is real tf.data (tensorflow-cpu), for the
tf.data scenarios. The "GPU" side is the simulator's: every batch the loop runs
a kernel of --step-kernel seconds on the GPU link (gpu_link.py), so utilization
emerges from how fast the pipeline delivers, and it prints "step N loss X"
every --log-every-s (the progress signal).

Pipelines (--before, then --after from --onset-s on):

  healthy  tf-native decode and resize of small JPEGs, map(num_parallel_calls=AUTOTUNE),
           batch, prefetch(AUTOTUNE)
  starved  map(tf.py_function(decode_image)): PIL decodes and resizes large JPEGs in
           Python, num_parallel_calls=1, no prefetch, tf.data's optimisations off
  serial   tf-native decode and resize of medium JPEGs in a serial map, no prefetch,
           optimisations off
  cached   the healthy pipeline with cache() (in memory) of 512x512 images, as many as
           fill the job's memory cgroup up to --cache-room-mib below its limit

With --rewrite-file, once the --after pipeline is steady (for "cached": its
cache is full) a thread named `checkpoint` rewrites that file in place: buffered
writes that, in a cgroup the cache has filled, reclaim must wait for.

TensorFlow 2.21 injects a prefetch and parallelises maps on its own unless its
optimisations are turned off (serial_options()), so "starved" and "serial"
would not stay serial without them.

`--prepare` writes the synthetic JPEGs the chosen pipelines read into
--data-dir (the orchestrator runs it before the clock starts). The job takes
its GPU memory (a slot on the link) after importing TensorFlow and building the
pipelines, as TensorFlow creates its GPU context at the first op. Phase times
(--onset-s, --log-every-s) are multiplied by --time-scale; per-batch times are
not. SIGTERM: releases the slot and exits 0.
"""

import argparse
import math
import os
import random
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from gpu_link import run_job  # noqa: E402
from knobs import name_thread  # noqa: E402

GIB = 1 << 30
MIB = 1 << 20

# Image sets: number of files, side in pixels.
IMAGE_SETS = {"small": (32, 128), "medium": (32, 512), "large": (16, 1024)}
# Pipeline: image set it reads, default batch size.
PIPELINES = {"healthy": ("small", 32), "starved": ("large", 64),
             "serial": ("medium", 8), "cached": ("small", 32)}
MODEL_SIDE = 224   # what the model takes
CACHED_SIDE = 512  # images kept by the cached pipeline (768 KiB each)


def decode_image(path):
    """The user's map function: PIL decodes one JPEG and resizes it (GIL-bound
    Python around C decoding, run by tf.py_function)."""
    from PIL import Image
    import numpy as np
    with Image.open(path.numpy().decode()) as image:
        image = image.convert("RGB").resize((MODEL_SIDE, MODEL_SIDE), Image.BILINEAR)
    return np.asarray(image, dtype=np.uint8)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    a = p.add_argument
    a("--link", help="GPU link file (gpu_link.py); required unless --prepare or --measure")
    a("--gpu", type=int, default=0)
    a("--gpu-memory-gib", type=float, default=40.0, help="GPU memory held once TensorFlow is up")
    a("--time-scale", type=float, default=1.0)
    a("--data-dir", default="images", help="where the JPEGs are (made by --prepare)")
    a("--before", choices=sorted(PIPELINES), default="healthy", help="pipeline until --onset-s")
    a("--after", choices=sorted(PIPELINES), help="pipeline from --onset-s on")
    a("--onset-s", type=float, help="switch to --after at this (scaled) time")
    a("--batch-size", type=int, help="batch of --before (default: the pipeline's)")
    a("--after-batch-size", type=int, help="batch of --after (default: the pipeline's)")
    a("--step-kernel", type=float, default=0.1, help="GPU seconds per batch")
    a("--after-step-kernel", type=float, help="GPU seconds per batch from the onset on")
    a("--cache-room-mib", type=int, default=256,
      help="cached: fill the memory cgroup up to this much below its limit")
    a("--cache-mib", type=int, default=512, help="cached: cache size when no cgroup limit applies")
    a("--rewrite-file", help="once --after is steady (its cache full), a thread rewrites this "
      "file in place (checkpoints)")
    a("--rewrite-mib", type=int, default=256, help="size of --rewrite-file")
    a("--rewrite-mib-per-s", type=float, default=2000.0, help="at most this fast")
    a("--log-every-s", type=float, default=10.0)
    a("--prepare", action="store_true", help="write the JPEGs the pipelines need, then exit")
    a("--measure", metavar="SECONDS", type=float,
      help="time --before's batches for SECONDS (no GPU link), print thread CPU, exit")
    args = p.parse_args(argv)
    if not (args.prepare or args.measure or args.link):
        p.error("--link is required")
    if args.after and args.onset_s is None:
        p.error("--after needs --onset-s")
    return args


# -- data -------------------------------------------------------------------
def image_dir(args, name):
    return os.path.join(args.data_dir, name)


def make_images(args):
    """Writes each needed set as JPEGs (stripes and a gradient under noise, so they
    compress and decode like photos rather than like flat colour)."""
    import numpy as np
    from PIL import Image
    sets = {PIPELINES[args.before][0]} | ({PIPELINES[args.after][0]} if args.after else set())
    rng = np.random.default_rng(0)
    for name in sorted(sets):
        count, side = IMAGE_SETS[name]
        folder = image_dir(args, name)
        os.makedirs(folder, exist_ok=True)
        y, x = np.mgrid[0:side, 0:side]
        for i in range(count):
            path = os.path.join(folder, f"img_{i:03d}.jpg")
            if os.path.exists(path):
                continue
            base = np.stack([(x * (i + 1) + y) % 256, (y * 3 + i * 7) % 256, (x ^ y) % 256], -1)
            noise = rng.integers(0, 48, (side, side, 3))
            Image.fromarray((base + noise).astype(np.uint8)).save(path + ".tmp", "JPEG", quality=90)
            os.replace(path + ".tmp", path)


def image_paths(args, pipeline):
    folder = image_dir(args, PIPELINES[pipeline][0])
    return sorted(os.path.join(folder, f) for f in os.listdir(folder) if f.endswith(".jpg"))


# -- memory cgroup (for the cached pipeline) --------------------------------
def cgroup_memory():
    """(limit bytes, anonymous bytes charged) of this process's memory cgroup, or None."""
    try:
        with open("/proc/self/cgroup") as f:
            lines = [line.rstrip("\n").split(":", 2) for line in f]
    except OSError:
        return None
    for _, controllers, path in lines:
        if "memory" in controllers.split(","):  # v1
            base = os.path.join("/sys/fs/cgroup/memory", path.lstrip("/"))
            limit_file, anon_key = "memory.limit_in_bytes", "rss"
            break
    else:
        path = next((p for _, c, p in lines if c == ""), None)
        if path is None:
            return None
        base = os.path.join("/sys/fs/cgroup", path.lstrip("/"))
        limit_file, anon_key = "memory.max", "anon"
    try:
        with open(os.path.join(base, limit_file)) as f:
            text = f.read().strip()
        with open(os.path.join(base, "memory.stat")) as f:
            stat = dict(line.split() for line in f if len(line.split()) == 2)
    except OSError:
        return None
    if text == "max":
        return None
    return int(text), int(stat.get(anon_key, 0))


def fill_until_full(tf, args, paths, full):
    """The cached pipeline's source: image paths, as many as it takes for the memory
    cgroup's anonymous memory (the cache, mostly) to reach --cache-room-mib below its
    limit, then the end of the dataset, so cache() is complete and serves every later
    epoch. Where no cgroup limit applies, --cache-mib worth of images. Counting on the
    way (not computing the number up front) keeps the room whatever TensorFlow's own
    buffers and allocator take meanwhile. Sets the event `full` at the end."""
    with open("/proc/meminfo") as f:
        host_bytes = int(f.readline().split()[1]) * 1024
    room = args.cache_room_mib * MIB
    fallback = max(1, args.cache_mib * MIB // (CACHED_SIDE * CACHED_SIDE * 3))

    def source():
        count = 0
        while True:
            memory = cgroup_memory()
            if memory is None or memory[0] >= host_bytes:
                if count >= fallback:
                    break
            elif memory[0] - memory[1] <= room:
                break
            yield paths[count % len(paths)]
            count += 1
        mib = count * CACHED_SIDE * CACHED_SIDE * 3 // MIB
        print(f"cache filled: {count} images ({mib} MiB)", flush=True)
        full.set()

    return tf.data.Dataset.from_generator(source, output_signature=tf.TensorSpec((), tf.string))


# -- pipelines ----------------------------------------------------------------
def serial_options(tf):
    """Turns off what would make a serial pipeline parallel behind the user's back."""
    options = tf.data.Options()
    options.autotune.enabled = False
    opt = options.experimental_optimization
    opt.apply_default_optimizations = False
    for name in ("map_parallelization", "inject_prefetch", "parallel_batch",
                 "map_and_batch_fusion", "seq_interleave_prefetch"):
        setattr(opt, name, False)
    return options


def build(tf, args, pipeline, batch, ready=None):
    """The tf.data pipeline `pipeline`, batched by `batch`, repeating forever.
    Returns (dataset, description). Sets the event `ready` once the pipeline is in its
    steady state (the cached pipeline: when its cache is full; the others at once)."""
    ready = ready or threading.Event()
    paths = image_paths(args, pipeline)
    autotune = tf.data.AUTOTUNE

    def native(side, method="bilinear"):
        def load(path):
            image = tf.io.decode_jpeg(tf.io.read_file(path), channels=3)
            return tf.cast(tf.image.resize(image, (side, side), method=method), tf.uint8)
        return load

    def py_decode(path):
        image = tf.py_function(decode_image, [path], tf.uint8)
        image.set_shape((MODEL_SIDE, MODEL_SIDE, 3))
        return image

    files = tf.data.Dataset.from_tensor_slices(paths)
    if pipeline != "cached":
        ready.set()
    if pipeline == "healthy":
        ds = files.repeat().map(native(MODEL_SIDE), num_parallel_calls=autotune)
        return ds.batch(batch).prefetch(autotune), "parallel map (AUTOTUNE), prefetch (AUTOTUNE)"
    if pipeline == "starved":
        ds = files.repeat().map(py_decode, num_parallel_calls=1).batch(batch)
        return ds.with_options(serial_options(tf)), "py_function(decode_image), 1 call, no prefetch"
    if pipeline == "serial":
        ds = files.repeat().map(native(MODEL_SIDE)).batch(batch)
        return ds.with_options(serial_options(tf)), "serial map, no prefetch"
    if pipeline == "cached":
        # Nearest-neighbour upscaling: cheap, so filling the cache keeps the GPU fed.
        ds = fill_until_full(tf, args, paths, ready).map(native(CACHED_SIDE, "nearest"),
                                                  num_parallel_calls=autotune)
        # prefetch(2), not AUTOTUNE: autotuning may buffer many 24 MiB batches after the
        # cache is full, and the room left in the cgroup would be a guess.
        return (ds.cache().repeat().batch(batch).prefetch(2),
                f"parallel map (AUTOTUNE), cache() in memory, prefetch 2")
    raise ValueError(pipeline)


def import_tensorflow():
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")  # no C++ log lines on stderr
    import tensorflow as tf
    tf.get_logger().setLevel("ERROR")
    return tf


# -- the job ----------------------------------------------------------------
def rewrite_forever(path, mib, mib_per_s):
    """Rewrites `path` in place, 1 MiB at a time, at most `mib_per_s`: buffered writes
    that reclaim must wait for once the cgroup has no room left."""
    name_thread("checkpoint")
    chunk = os.urandom(MIB)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
    offset, due, last = 0, 0.0, time.monotonic()
    while True:
        time.sleep(0.05)
        now = time.monotonic()
        due, last = min(due + mib_per_s * (now - last), mib_per_s), now
        while due >= 1:
            os.pwrite(fd, chunk, offset)
            offset, due = (offset + MIB) % (mib * MIB), due - 1


class Job:
    def __init__(self, args, tf):
        self.args = args
        self.ts = args.time_scale
        self.step = 0
        self.last_log = time.monotonic()
        self.tf = tf
        self.before = build(tf, args, args.before, args.batch_size or PIPELINES[args.before][1])

    def log(self, text):
        print(text, flush=True)
        self.last_log = time.monotonic()

    def loss(self):
        return 2.5 * math.exp(-self.step / 3000) + 0.05 + random.random() * 0.02

    def run(self, slot, start):
        a = self.args
        onset = start + a.onset_s * self.ts if a.after else None
        kernel, ready, writer = a.step_kernel, threading.Event(), bool(a.rewrite_file)
        iterator = iter(self.before[0])
        self.log(f"start training: {a.before} pipeline, {self.before[1]}")
        log_every = a.log_every_s * self.ts
        while True:
            if onset is not None and time.monotonic() >= onset:
                onset, switch = None, time.monotonic()
                # The old pipeline's iterator is kept, not deleted: deleting it once held
                # this loop 9.5 s here (the old pipeline's threads ended just as it went
                # on), with the GPU idle, in a 12 s window at the suite's time scale. Kept, it idles with its
                # buffers full, and the cache counts its room with those buffers in.
                self.before_iterator = iterator
                after = build(self.tf, a, a.after, a.after_batch_size or PIPELINES[a.after][1], ready)
                iterator = iter(after[0])
                if a.after_step_kernel is not None:
                    kernel = a.after_step_kernel
                self.log(f"step {self.step}: now the {a.after} pipeline, {after[1]} "
                         f"(built in {time.monotonic() - switch:.1f} s)")
            if writer and ready.is_set():  # the cached pipeline: once the cache is full
                writer = False
                threading.Thread(target=rewrite_forever, daemon=True,
                                 args=(a.rewrite_file, a.rewrite_mib, a.rewrite_mib_per_s)).start()
                self.log(f"step {self.step}: rewriting {os.path.basename(a.rewrite_file)} from now on")
            next(iterator)
            slot.run_kernel(kernel)
            self.step += 1
            if time.monotonic() - self.last_log >= log_every:
                self.log(f"step {self.step} loss {self.loss():.4f}")


def measure(args, tf):
    """Batches per second of --before and the CPU of each thread: for sizing scenarios."""
    ds, description = build(tf, args, args.before, args.batch_size or PIPELINES[args.before][1])
    iterator = iter(ds)
    next(iterator)

    def threads():
        out = {}
        for tid in os.listdir("/proc/self/task"):
            try:
                with open(f"/proc/self/task/{tid}/stat") as f:
                    text = f.read()
            except OSError:
                continue
            fields = text.rsplit(")", 1)[1].split()
            out[tid] = (text[text.index("(") + 1:text.rindex(")")], int(fields[11]) + int(fields[12]))
        return out

    ticks = os.sysconf("SC_CLK_TCK")
    t0, c0, n, waited = time.monotonic(), threads(), 0, 0.0
    while time.monotonic() - t0 < args.measure:
        t = time.monotonic()
        next(iterator)
        waited += time.monotonic() - t
        time.sleep(args.step_kernel)
        n += 1
    span, c1 = time.monotonic() - t0, threads()
    busy = n * args.step_kernel / span
    print(f"{args.before}: {description}; {n} batches, {1000 * waited / n:.0f} ms waiting per batch, "
          f"kernel {1000 * args.step_kernel:.0f} ms: utilization {busy:.2f}")
    cpu = sorted(((c1[t][1] - c0.get(t, ("", 0))[1]) / ticks / span, t, c1[t][0]) for t in c1)
    print("threads (core share, tid, name):", [(round(c, 2), t, name) for c, t, name in reversed(cpu[-5:])])


def main(argv=None):
    args = parse_args(argv)
    if args.prepare:
        make_images(args)
        return 0
    if args.measure:
        measure(args, import_tensorflow())
        return 0
    start = time.monotonic()

    def body(take):
        job = Job(args, import_tensorflow())
        job.run(take(args.gpu, int(args.gpu_memory_gib * GIB)), start)

    run_job(args.link, body)  # os._exit: TensorFlow's thread pools can make a normal exit slow

if __name__ == "__main__":
    main()
