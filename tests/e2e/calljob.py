"""A Python job whose calls take known times and which measures them itself,
for the time-per-call tests.

    calljob.py calls        four threads, each calling one function over and
                            over with a pause of 0.12 s between calls:
                            `burn` (CPU-bound, 0.4 s) from `cpu_loop`,
                            `fetch` (blocking, 0.3 s) from `io_loop`,
                            `resize` (CPU-bound) from `small` (0.3 s) and
                            from `large` (0.6 s) in turn, and `tiny`
                            (CPU-bound, 5 ms) from `tiny_loop`
    calljob.py torch N [busy]
                            a PyTorch DataLoader with N workers (0: in the
                            loop's own process), batches of 4 items of which
                            each sleeps 0.1 s (N=0) or 0.25 s in
                            `__getitem__` (workers start 0.5 s apart); the
                            loop steps for 0.1 s a batch; `busy`: the
                            items burn the CPU instead of sleeping
    calljob.py tf           a tf.data pipeline: `Dataset.range` mapped
                            through `tf.py_function(load)`, where each item
                            sleeps 0.1 s, in batches of 4; the loop steps
                            for 0.1 s a batch

Each call prints `call NAME SECONDS END`: the call's own duration and the
time (since the epoch) it ended; each batch `wait SECONDS END`: the loop's
own wait for it. Prints "ready" once it runs.
"""

import os
import sys
import threading
import time

PAUSE = 0.12


def report(what, name, seconds):
    print(f"{what} {name} {seconds:.4f} {time.time():.4f}", flush=True)


def burn(seconds):
    start = time.perf_counter()
    x = 0
    while time.perf_counter() - start < seconds:
        x += 1


def fetch(seconds):
    time.sleep(seconds)


def resize(seconds):
    start = time.perf_counter()
    x = 0
    while time.perf_counter() - start < seconds:
        x += 1


def tiny():
    start = time.perf_counter()
    x = 0
    while time.perf_counter() - start < 0.005:
        x += 1


# Each caller times the whole call, from its own frame.
def timed(name, call, *args):
    start = time.perf_counter()
    call(*args)
    report("call", name, time.perf_counter() - start)


def cpu_loop():
    while True:
        timed("burn", burn, 0.4)
        time.sleep(PAUSE)


def io_loop():
    while True:
        timed("fetch", fetch, 0.3)
        time.sleep(PAUSE)


def small():
    start = time.perf_counter()
    resize(0.3)
    report("call", "resize_small", time.perf_counter() - start)


def large():
    start = time.perf_counter()
    resize(0.6)
    report("call", "resize_large", time.perf_counter() - start)


def resize_loop():
    while True:
        small()
        time.sleep(PAUSE)
        large()
        time.sleep(PAUSE)


def tiny_loop():
    while True:
        timed("tiny", tiny)
        time.sleep(PAUSE)


def calls():
    for loop in (cpu_loop, io_loop, resize_loop, tiny_loop):
        threading.Thread(target=loop, daemon=True).start()
    print("ready", flush=True)
    while True:
        time.sleep(1)


class Images:
    """Items that take a known time each."""

    def __init__(self, seconds, busy=False):
        self.seconds = seconds
        self.busy = busy

    def __len__(self):
        return 1_000_000

    def __getitem__(self, i):
        if self.busy:
            burn(self.seconds)
        else:
            time.sleep(self.seconds)
        return i


def stagger(worker):
    """Workers start half a batch apart, so that batches come evenly (two
    workers started together finish their batches in pairs: every other
    wait would be none)."""
    time.sleep(worker * 0.5)


def train_step():
    time.sleep(0.1)


def train(batches):
    """The training loop: waits for each batch, timing its own wait, then
    steps."""
    step = 0
    while True:
        start = time.perf_counter()
        next(batches)
        report("wait", "batch", time.perf_counter() - start)
        train_step()
        step += 1
        if step == 3:
            print("ready", flush=True)


def torch_batches(workers, busy):
    import torch.utils.data

    item = 0.1 if workers == 0 else 0.25
    loader = torch.utils.data.DataLoader(Images(item, busy), batch_size=4, num_workers=workers,
                                         worker_init_fn=stagger if workers else None)
    return iter(loader)


def load(i):
    time.sleep(0.1)
    return i


def tf_batches():
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf

    dataset = tf.data.Dataset.range(1_000_000).map(lambda i: tf.py_function(load, [i], tf.int64)).batch(4)
    return iter(dataset)


if __name__ == "__main__":
    if sys.argv[1] == "calls":
        calls()
    elif sys.argv[1] == "tf":
        train(tf_batches())
    else:
        train(torch_batches(int(sys.argv[2]), sys.argv[3:] == ["busy"]))
