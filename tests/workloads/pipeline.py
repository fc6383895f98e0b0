"""The input pipeline of the simulated training job: real CPU, thread and file
work per sample, batched and prefetched for the GPU loop.

    source (read) -> map (sleep, Python CPU) -> batch -> [map after batch] -> prefetch

- `workers` map threads (`map_worker_N`, sharing the GIL like a py_function in
  tf.data) or worker processes (`map_worker_N`, children of the job like
  PyTorch DataLoader workers, each sending 1 KiB records through its own pipe
  to the `loader` thread).
- `py_map` batches samples and, with `map_after_batch`, runs the per-sample
  work for the whole batch itself, in one thread (the articles' anti-pattern).
- `cache_fill` keeps "every sample" in RAM (real, touched memory) up to a
  limit, then spills to a file (a cache() larger than memory).

Nothing here writes except the spill, so the job's `wchar` stays its output.
Run as `python3 pipeline.py worker ...` it is one worker process.
"""

import argparse
import json
import mmap
import os
import queue
import selectors
import signal
import struct
import sys
import threading
import time

from knobs import Knobs, name_thread

RECORD = 1024
MIB = 1 << 20


def burn_cpu(ms):
    """Pure-Python arithmetic (holds the GIL) until this thread used `ms` of CPU."""
    end = time.thread_time() + ms / 1000.0
    x = 1
    while time.thread_time() < end:
        for _ in range(300):
            x = (x * 1103515245 + 12345) & 0x7FFFFFFF
    return x


class Reader:
    """Blocking reads of a data file that miss the page cache: O_DIRECT into an
    aligned buffer where the file system allows it, else a buffered read after
    POSIX_FADV_DONTNEED. One per thread."""

    def __init__(self, path):
        self.path = path
        self.size = os.stat(path).st_size
        self.direct = True
        try:
            self.fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
        except OSError:
            self.direct = False
            self.fd = os.open(path, os.O_RDONLY)
        self.buf = None

    def read(self, index, nbytes):
        length = max(4096, (nbytes + 4095) // 4096 * 4096)
        span = max(1, (self.size - length) // 4096)
        offset = (index * 7919) % span * 4096
        if self.direct:
            if self.buf is None or len(self.buf) < length:
                self.buf = mmap.mmap(-1, length)
            try:
                return os.preadv(self.fd, [memoryview(self.buf)[:length]], offset)
            except OSError:
                os.close(self.fd)
                self.fd = os.open(self.path, os.O_RDONLY)
                self.direct = False
        os.posix_fadvise(self.fd, offset, length, os.POSIX_FADV_DONTNEED)
        return len(os.pread(self.fd, length, offset))


class SampleWork:
    """Per-sample work shared by map threads and worker processes."""

    def __init__(self, data_file):
        self.data_file = data_file
        self.local = threading.local()
        self.shard_lock = threading.Lock()
        self.open_shard = -1

    def fetch(self, index, k):
        if k.shard_samples > 0 and index // k.shard_samples > self.open_shard:
            with self.shard_lock:  # every worker waits while the next shard opens
                if index // k.shard_samples > self.open_shard:
                    time.sleep(k.shard_open_ms / 1000.0)
                    self.open_shard = index // k.shard_samples
        if k.read_bytes > 0 and self.data_file:
            if getattr(self.local, "reader", None) is None:
                self.local.reader = Reader(self.data_file)
            self.local.reader.read(index, k.read_bytes)

    def transform(self, k):
        if k.sleep_ms > 0:
            time.sleep(k.sleep_ms / 1000.0)
        if k.python_work_ms > 0:
            burn_cpu(k.python_work_ms)


class Pipeline:
    def __init__(self, knobs, batch_size, prefetch, workers, worker_kind, data_file=None,
                 cache_limit_mib=0, spill_file=None, spill_mib=64):
        self.knobs = knobs
        self.batch_size = batch_size
        self.workers = workers
        self.worker_kind = worker_kind
        self.cache_limit_mib = cache_limit_mib
        self.spill_file = spill_file
        self.spill_mib = spill_mib
        self.work = SampleWork(data_file)
        self.data_file = data_file
        self.stop = threading.Event()
        self.samples = queue.Queue(maxsize=batch_size)
        self.batches = queue.Queue(maxsize=max(1, prefetch))
        self.next_index = 0
        self.index_lock = threading.Lock()
        self.processes = []
        self.cache = []

    def start(self):
        if self.worker_kind == "process":
            self._start_processes()
        else:
            for i in range(self.workers):
                self._thread(f"map_worker_{i}", self._map_thread, i)
        self._thread("py_map", self._batch_thread)
        if self.cache_limit_mib > 0:
            self._thread("cache_fill", self._cache_thread)

    def _thread(self, name, target, *args):
        def run():
            name_thread(name)
            target(*args)
        threading.Thread(target=run, name=name, daemon=True).start()

    def _put(self, q, item):
        while not self.stop.is_set():
            try:
                q.put(item, timeout=0.2)
                return True
            except queue.Full:
                pass
        return False

    def _map_thread(self, worker):
        while not self.stop.is_set():
            k = self.knobs.now()
            if worker >= k.workers:
                time.sleep(0.05)
                continue
            with self.index_lock:
                index = self.next_index
                self.next_index += 1
            self.work.fetch(index, k)
            if not k.map_after_batch:
                self.work.transform(k)
            if not self._put(self.samples, index):
                return

    def _start_processes(self):
        import subprocess
        spec = json.dumps({"knobs": self.knobs.to_json(), "data_file": self.data_file})
        for i in range(self.workers):
            p = subprocess.Popen(
                [sys.executable, os.path.abspath(__file__), "worker", str(i), str(self.workers), spec],
                stdout=subprocess.PIPE, stdin=subprocess.DEVNULL)
            try:
                import fcntl
                fcntl.fcntl(p.stdout.fileno(), fcntl.F_SETPIPE_SZ, 4096)
            except OSError:
                pass
            self.processes.append(p)
        self._thread("loader", self._loader_thread)

    def _loader_thread(self):
        sel = selectors.DefaultSelector()
        buffers = {}
        for p in self.processes:
            sel.register(p.stdout.fileno(), selectors.EVENT_READ)
            buffers[p.stdout.fileno()] = b""
        while not self.stop.is_set() and buffers:
            for key, _ in sel.select(timeout=0.2):
                fd = key.fd
                data = os.read(fd, RECORD - len(buffers[fd]))
                if not data:
                    sel.unregister(fd)
                    del buffers[fd]
                    continue
                buffers[fd] += data
                if len(buffers[fd]) == RECORD:
                    index, _ = struct.unpack_from("<qq", buffers[fd])
                    buffers[fd] = b""
                    if not self._put(self.samples, index):
                        return

    def _batch_thread(self):
        while not self.stop.is_set():
            batch = []
            while len(batch) < self.batch_size and not self.stop.is_set():
                try:
                    batch.append(self.samples.get(timeout=0.2))
                except queue.Empty:
                    pass
            k = self.knobs.now()
            if k.map_after_batch:
                for _ in batch:
                    self.work.transform(k)
            if not self._put(self.batches, batch):
                return

    def _cache_thread(self):
        held, due, last = 0, 0.0, time.monotonic()
        spill_fd, spill_off, chunk = None, 0, os.urandom(MIB)
        while not self.stop.wait(0.1):
            now = time.monotonic()
            dt, last = now - last, now
            k = self.knobs.now()
            if held < self.cache_limit_mib:
                due += k.cache_grow_mib_per_s * dt
                while due >= 1 and held < self.cache_limit_mib:
                    block = bytearray(MIB)
                    block[::4096] = b"\x01" * (MIB // 4096)
                    self.cache.append(block)
                    held, due = held + 1, due - 1
            elif k.spill_mib_per_s > 0 and self.spill_file:
                if spill_fd is None:
                    spill_fd = os.open(self.spill_file, os.O_WRONLY | os.O_CREAT, 0o600)
                due = min(due + k.spill_mib_per_s * dt, k.spill_mib_per_s)  # at most 1 s behind
                while due >= 1:
                    os.pwrite(spill_fd, chunk, spill_off)
                    spill_off, due = (spill_off + MIB) % (self.spill_mib * MIB), due - 1

    def get_batch(self, timeout):
        try:
            return self.batches.get(timeout=timeout)
        except queue.Empty:
            return None

    def close(self):
        self.stop.set()
        for p in self.processes:
            if p.poll() is None:
                p.terminate()
        for p in self.processes:
            try:
                p.wait(timeout=2)
            except Exception:
                p.kill()


def worker_main(index, count, spec):
    """A worker process: samples index, index + count, ... to stdout as records."""
    from knobs import set_parent_death_signal
    set_parent_death_signal(signal.SIGKILL)
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    name_thread(f"map_worker_{index}")
    spec = json.loads(spec)
    knobs = Knobs.from_json(spec["knobs"])
    work = SampleWork(spec["data_file"])
    out = sys.stdout.buffer.raw if hasattr(sys.stdout.buffer, "raw") else sys.stdout.buffer
    sample = index
    while True:
        k = knobs.now()
        if index >= k.workers:
            time.sleep(0.05)
            continue
        work.fetch(sample, k)
        if not k.map_after_batch:
            work.transform(k)
        record = struct.pack("<qq", sample, 0).ljust(RECORD, b"\0")
        view = memoryview(record)
        while view:
            view = view[os.write(out.fileno(), view):]
        sample += count


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("role", choices=["worker"])
    parser.add_argument("index", type=int)
    parser.add_argument("count", type=int)
    parser.add_argument("spec")
    a = parser.parse_args()
    try:
        worker_main(a.index, a.count, a.spec)
    except (BrokenPipeError, KeyboardInterrupt):
        os._exit(0)
