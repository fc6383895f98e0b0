"""A real PyTorch training job (torch on CPU) that goes through a known timeline, for
the GPU-time ledger's timeline test (test_goodput_timeline.py). Started by torchrun
as its one worker; its stand-in GPU (GPU_LINK, GPU_INDEX: tests/workloads/gpu_link.py)
reads busy while the job computes a training step (forward, backward, optimizer step)
and idle otherwise.

    torch_timeline.py DIR

It writes each stretch's true start to `DIR/marks.jsonl` as it begins (one JSON line:
attempt, mark, wall-clock time, pid), so the test knows the truth to the millisecond.
The first attempt (TORCHELASTIC_RESTART_COUNT 0):

1. `start`: takes its GPU, then imports torch and its compiler (Dynamo, Inductor) and
   builds its model and the shards of its state: start-up;
2. `compile`: a real `torch.compile` warm-up of the model (forward and backward; the
   default Inductor backend generating and building C++ for the CPU, in a fresh cache
   directory, so cold): the GPU idles;
3. `train`: training steps through the compiled model, from an in-memory DataLoader;
4. `slow_input`: a real DataLoader (num_workers=0) whose `__getitem__` burns Python CPU
   (the GPU starved: a step every 2.6 s);
5. `train`: training again;
6. `checkpoint`: a real `torch.save` of the model's, the optimizer's and the shards'
   state (many tensors: seconds of pickling and writing), the GPU idle;
7. `train`: training again (the progress a crash loses: after the last checkpoint);
8. `deadlock`: the training loop and a writer thread each take one of two locks and
   wait for the other's: no progress, the GPU idle, until killed.

A restarted attempt (torchrun --max-restarts) takes its GPU, imports the same (`start`),
trains (`train`; eagerly: no compile, no restore), writes `end` and exits 0.

Stretch lengths come from the environment (seconds): TIMELINE_TRAIN_S (the first
training), TIMELINE_SLOW_S, TIMELINE_BETWEEN_S (the two trainings between stretches),
TIMELINE_RESTART_TRAIN_S, and TIMELINE_SHARDS (tensors in the saved state).
"""

import json
import os
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "workloads"))
from gpu_link import GpuLink  # noqa: E402
from pipeline import burn_cpu  # noqa: E402

OUT = Path(sys.argv[1])
ATTEMPT = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
TRAIN_S = float(os.environ.get("TIMELINE_TRAIN_S", "30"))
SLOW_S = float(os.environ.get("TIMELINE_SLOW_S", "30"))
BETWEEN_S = float(os.environ.get("TIMELINE_BETWEEN_S", "15"))
RESTART_TRAIN_S = float(os.environ.get("TIMELINE_RESTART_TRAIN_S", "25"))
SHARDS = int(os.environ.get("TIMELINE_SHARDS", "500000"))
GIB = 1 << 30


def mark(name):
    with open(OUT / "marks.jsonl", "a") as f:
        f.write(json.dumps({"attempt": ATTEMPT, "mark": name, "t": time.time(), "pid": os.getpid()}) + "\n")


def log(text):
    print(f"[attempt {ATTEMPT}] {text}", flush=True)


class Slow:
    """The user's dataset on a bad day: each sample costs 20 ms of Python CPU (a batch of
    128, the compiled model's shape, 2.6 s)."""

    def __len__(self):
        return 1 << 30

    def __getitem__(self, index):
        import torch
        burn_cpu(20)
        return torch.randn(64), index % 10


def train(model, optimizer, batches, seconds, slot):
    """Training steps until `seconds` have passed; the GPU busy while a step computes."""
    import torch
    end = time.monotonic() + seconds
    step, last = 0, 0.0
    while time.monotonic() < end:
        x, y = next(batches)
        with slot.kernel():
            loss = torch.nn.functional.cross_entropy(model(x), y)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
        step += 1
        if time.monotonic() - last >= 1.0:
            last = time.monotonic()
            log(f"step {step} loss {loss.item():.4f}")


def endless(loader):
    while True:
        yield from loader


def deadlock():
    """The user's bug: the loop and a writer thread take two locks in opposite orders."""
    first, second = threading.Lock(), threading.Lock()
    writer_has_second = threading.Event()

    def writer():
        with second:
            writer_has_second.set()
            with first:
                pass

    with first:
        threading.Thread(target=writer, name="writer", daemon=True).start()
        writer_has_second.wait()
        with second:
            pass


def main():
    link = GpuLink.attach(os.environ["GPU_LINK"])
    # The job holds its GPU from its start (as a CUDA job does once its context is up).
    slot = link.register(os.getpid(), int(os.environ.get("GPU_INDEX", "0")), 4 * GIB)
    mark("start")
    log("importing torch")
    import torch
    import torch._dynamo  # noqa: F401
    import torch._inductor.compile_fx  # noqa: F401
    import torch.optim
    from torch.utils.data import DataLoader, TensorDataset

    torch.set_num_threads(1)
    torch.manual_seed(ATTEMPT)
    model = torch.nn.Sequential(torch.nn.Linear(64, 512), torch.nn.ReLU(), torch.nn.Linear(512, 512),
                                torch.nn.ReLU(), torch.nn.Linear(512, 10))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    data = TensorDataset(torch.randn(4096, 64), torch.randint(0, 10, (4096,)))
    fast = endless(DataLoader(data, batch_size=128, shuffle=True))
    if ATTEMPT > 0:
        mark("train")
        train(model, optimizer, fast, RESTART_TRAIN_S, slot)
        mark("end")
        log("done")
        slot.release()
        return 0
    # The state a checkpoint saves besides the model: many small tensors (an embedding
    # table kept in shards, say).
    shards = {f"shard.{i}": torch.full((16,), float(i)) for i in range(SHARDS)}

    mark("compile")
    log("torch.compile warm-up")
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(OUT / "inductor")
    torch._inductor.config.compile_threads = 1
    compiled = torch.compile(model)
    x, y = next(fast)
    torch.nn.functional.cross_entropy(compiled(x), y).backward()
    optimizer.zero_grad()

    mark("train")
    train(compiled, optimizer, fast, TRAIN_S, slot)

    mark("slow_input")
    slow = endless(DataLoader(Slow(), batch_size=128, num_workers=0))
    train(compiled, optimizer, slow, SLOW_S, slot)

    mark("train")
    train(compiled, optimizer, fast, BETWEEN_S, slot)

    mark("checkpoint")
    log(f"saving a checkpoint of {SHARDS} shards")
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "shards": shards},
               OUT / "checkpoint.pt")

    mark("train")
    log("checkpoint saved")
    train(compiled, optimizer, fast, BETWEEN_S, slot)

    mark("deadlock")
    log("the training loop deadlocks")
    deadlock()
    return 1


if __name__ == "__main__":
    sys.exit(main())
