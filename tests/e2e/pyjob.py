"""A Python job whose stacks are known, for the stack tests.

    pyjob.py decode     a thread named `spinner` decodes in pure Python
                        (`decode_image`) at a full core; the main thread
                        waits on a queue; output every 0.2 s
    pyjob.py deadlock   two threads deadlocked on two locks (`take_both`),
                        the main thread joins them; no output after "ready"
    pyjob.py pool       three unnamed threads share GIL-bound work
                        (`py_function`), each at about a third of a core

Prints "ready" once its threads run. Meant to be copied into a directory
whose name must never show up in what stallwatch exports.
"""

import ctypes
import queue
import sys
import threading
import time


def name_this_thread(name):
    ctypes.CDLL(None).prctl(15, name.encode(), 0, 0, 0)  # PR_SET_NAME


def decode_image(n):
    total = 0
    for i in range(n):
        total += i * i % 7
    return total


def spinner():
    name_this_thread("spinner")
    while True:
        decode_image(20000)


def py_function():
    while True:
        decode_image(5000)


first, second = threading.Lock(), threading.Lock()


def take_both(a, b):
    with a:
        time.sleep(0.3)
        with b:
            pass


def main():
    mode = sys.argv[1]
    if mode == "decode":
        threading.Thread(target=spinner, daemon=True).start()
        batches = queue.Queue()
        print("ready", flush=True)
        step = 0
        while True:
            try:
                batches.get(timeout=0.2)
            except queue.Empty:
                pass
            step += 1
            print(f"step {step}", flush=True)
    elif mode == "deadlock":
        workers = [
            threading.Thread(target=take_both, args=(first, second)),
            threading.Thread(target=take_both, args=(second, first)),
        ]
        for w in workers:
            w.start()
        print("ready", flush=True)
        for w in workers:
            w.join()
    elif mode == "pool":
        for _ in range(3):
            threading.Thread(target=py_function, daemon=True).start()
        print("ready", flush=True)
        while True:
            time.sleep(0.2)
            print("step", flush=True)


main()
