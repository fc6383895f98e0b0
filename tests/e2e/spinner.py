"""A stand-in training process: one thread named `spinner` pinned at 100% of a
core, the main thread asleep, a child process, output to stdout every 0.2 s."""

import ctypes
import subprocess
import sys
import threading
import time

PR_SET_NAME = 15


def name_this_thread(name):
    ctypes.CDLL(None).prctl(PR_SET_NAME, name.encode(), 0, 0, 0)


def spin():
    name_this_thread("spinner")
    x = 0
    while True:
        x += 1


child = subprocess.Popen(["sleep", "600"])
threading.Thread(target=spin, daemon=True).start()
print("ready", flush=True)
step = 0
while True:
    if "--quiet" not in sys.argv:
        step += 1
        print(f"step {step}", flush=True)
    time.sleep(0.2)
