"""A Python job that rewrites its own interpreter's structures, as a hostile
user on a shared cluster could, for the tests of the contained stack reader.

    hostile.py thread_cycle   the thread list loops: the main thread's
                              `next` points back to itself
    hostile.py frame_cycle    a frame's `previous` points back to itself
    hostile.py deep_names     3,900 frames of 3,000-character names
    hostile.py deep_cycle     both: the deep stack, and the thread list loops
    hostile.py bad_names      a running function's names and line table
                              point at unmapped memory, another's are huge
    hostile.py many_threads   10,000 Python threads
    hostile.py honest         a plain job (a thread spinning in `work`)

With `later` after thread_cycle or frame_cycle, the job is honest until it
gets SIGUSR1 (so that a reader that already knows it meets the loop).

Each finds the offsets it writes at by looking for known pointers (and
exits with status 3, printing "unsupported", where it cannot), prints
"ready" once done, and then never returns from the rewritten frames. Only
CPython 3.11 and 3.12 layouts are known here.
"""

import ctypes
import sys
import threading
import time

PTR = ctypes.sizeof(ctypes.c_void_p)


def unsupported(why):
    print(f"unsupported: {why}", flush=True)
    sys.exit(3)


def words(address, count):
    return (ctypes.c_void_p * count).from_address(address)


def slot_of(address, value, count=48):
    """Offset (in pointers) of `value` among the first `count` words at `address`."""
    w = words(address, count)
    for i in range(count):
        if w[i] == value:
            return i
    return None


def tstate():
    get = ctypes.pythonapi.PyThreadState_Get
    get.restype = ctypes.c_void_p
    return get()


def loop_thread_list():
    """The calling thread's `next` made to point at itself (prev, next are
    the first two words of PyThreadState in 3.x; checked with a second
    thread, whose `next` is this one)."""
    mine = tstate()
    other = {}
    ready = threading.Event()
    release = threading.Event()

    def second():
        other["ts"] = tstate()
        ready.set()
        release.wait()

    t = threading.Thread(target=second, daemon=True)
    t.start()
    ready.wait()
    head = other["ts"]
    if words(head, 2)[1] != mine or words(mine, 2)[0] != head:
        unsupported("PyThreadState prev/next not where expected")
    # Leave the second thread in place; this one's `next` loops.
    words(mine, 2)[1] = mine


def interpreter_frame(frame):
    """`frame`'s _PyInterpreterFrame and the offset of its
    `previous` pointer (3.11: after f_code and frame_obj; 3.12: after f_code)."""
    if sys.version_info[:2] not in ((3, 11), (3, 12)):
        unsupported(f"frame layout of Python {sys.version_info[:2]} not known here")
    f_frame = words(id(frame), 4)[3]  # PyObject_HEAD (2), f_back, f_frame
    code_at = slot_of(f_frame, id(frame.f_code), 8)
    if code_at is None:
        unsupported("f_code not found in the interpreter frame")
    if sys.version_info[:2] == (3, 11):
        if words(f_frame, 6)[5] != id(frame):
            unsupported("frame_obj not where expected")
        return f_frame, 6
    return f_frame, code_at + 1


def loop_frame_list(frame):
    """`frame` (which must never return) made its own caller."""
    f_frame, previous = interpreter_frame(frame)
    words(f_frame, previous + 1)[previous] = f_frame


def spin_forever():
    while True:
        time.sleep(0.05)


def deep(n, then):
    if n == 0:
        then()
        spin_forever()
    deep(n - 1, then)


def long_named(depth, chars):
    """`deep` renamed to a name of `chars` characters."""
    name = "x" * chars
    global deep
    deep.__code__ = deep.__code__.replace(co_name=name, co_qualname=name)
    sys.setrecursionlimit(depth + 1000)


def bad_names():
    def unmapped():
        spin_forever()

    def huge():
        threading.Thread(target=unmapped, daemon=True).start()
        spin_forever()

    code = unmapped.__code__
    for attr in ("co_name", "co_qualname", "co_filename", "co_linetable"):
        if slot_of(id(code), id(getattr(code, attr))) is None:
            unsupported(f"{attr} not found in the code object")
    w = words(id(code), 48)
    for attr in ("co_name", "co_qualname", "co_linetable"):
        w[slot_of(id(code), id(getattr(code, attr)))] = 0x10
    big = "y" * 50_000_000
    huge.__code__ = huge.__code__.replace(co_name=big, co_qualname=big, co_linetable=b"\x00" * 20_000_000)
    huge()


def many_threads(n=10_000):
    threading.stack_size(64 * 1024)
    stop = threading.Event()
    for _ in range(n):
        threading.Thread(target=stop.wait, daemon=True).start()


def work():
    total = 0
    while True:
        for i in range(20000):
            total += i * i % 7


def when(later, rewrite):
    """Rewrites now, or on SIGUSR1 when `later`; then says ready."""
    if later:
        import signal
        signal.signal(signal.SIGUSR1, lambda *_: rewrite())
    else:
        rewrite()
    print("ready", flush=True)


def main(mode, later=False):
    if mode == "thread_cycle":
        when(later, loop_thread_list)
        spin_forever()
    elif mode == "frame_cycle":
        def then():
            # The frame of deep(0), which calls then() and never returns.
            bottom = sys._getframe(1)
            when(later, lambda: loop_frame_list(bottom))
        deep(20, then)
    elif mode in ("deep_names", "deep_cycle"):
        long_named(3900, 3000)

        def then():
            if mode == "deep_cycle":
                loop_thread_list()
            print("ready", flush=True)
        deep(3900, then)
    elif mode == "bad_names":
        threading.Timer(0.5, lambda: print("ready", flush=True)).start()
        bad_names()
    elif mode == "many_threads":
        many_threads()
        print("ready", flush=True)
        spin_forever()
    elif mode == "honest":
        threading.Thread(target=work, name="worker", daemon=True).start()
        print("ready", flush=True)
        spin_forever()
    else:
        sys.exit(f"unknown mode {mode}")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:] == ["later"])
