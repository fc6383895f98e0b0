"""A configurable stand-in job (a real process) for the end-to-end tests.

    job.py [--comm HEX] [--thread HEX]... [--proc-comm HEX]... [--threads N]
           [--spin SECONDS [--spin-name HEX] [--spin-by-proc]] [--zombie]
           [--print-every SECONDS] [-- IGNORED...]

--comm       sets the process name (main thread) with prctl(PR_SET_NAME);
             HEX is the name's bytes in hex, so any byte can be passed
--thread     starts a sleeping thread that names itself with prctl
--proc-comm  starts a sleeping thread named by writing /proc/self/task/<tid>/comm
--threads    starts N more sleeping threads
--spin       burns CPU in a thread named `spin` (or --spin-name HEX; named
             through /proc with --spin-by-proc) for that many seconds
--zombie     forks a child that exits at once and is never reaped
--print-every  prints a line to stdout every that many seconds

Prints `ready <pid>` once everything is in place, then sleeps until killed.
"""

import argparse
import ctypes
import os
import threading
import time

PR_SET_NAME = 15
libc = ctypes.CDLL(None, use_errno=True)


def set_name(name: bytes):
    if libc.prctl(PR_SET_NAME, ctypes.c_char_p(name), 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_NAME)")


def sleeper(named, ready):
    named()
    ready.release()
    while True:
        time.sleep(3600)


def start(named, ready):
    threading.Thread(target=sleeper, args=(named, ready), daemon=True).start()


def write_comm(name: bytes):
    tid = threading.get_native_id()
    with open(f"/proc/self/task/{tid}/comm", "wb") as f:
        f.write(name)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--comm")
    p.add_argument("--thread", action="append", default=[])
    p.add_argument("--proc-comm", action="append", default=[])
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--spin", type=float, default=0.0)
    p.add_argument("--spin-name", default=b"spin".hex())
    p.add_argument("--spin-by-proc", action="store_true")
    p.add_argument("--zombie", action="store_true")
    p.add_argument("--print-every", type=float, default=0.0)
    p.add_argument("ignored", nargs="*", help="after --: arguments the job ignores")
    a = p.parse_args()
    if a.spin:
        def spin():
            (write_comm if a.spin_by_proc else set_name)(bytes.fromhex(a.spin_name))
            end = time.monotonic() + a.spin
            while time.monotonic() < end:
                pass
        threading.Thread(target=spin, daemon=True).start()
    ready = threading.Semaphore(0)
    named = [lambda n=bytes.fromhex(h): set_name(n) for h in a.thread]
    named += [lambda n=bytes.fromhex(h): write_comm(n) for h in a.proc_comm]
    named += [lambda: None] * a.threads
    for n in named:
        start(n, ready)
    for _ in named:
        ready.acquire()
    if a.zombie and os.fork() == 0:
        os._exit(0)
    if a.comm:
        set_name(bytes.fromhex(a.comm))
    print(f"ready {os.getpid()}", flush=True)
    step = 0
    while True:
        if a.print_every:
            step += 1
            time.sleep(a.print_every)
            print(f"step {step}", flush=True)
        else:
            time.sleep(3600)


if __name__ == "__main__":
    main()
