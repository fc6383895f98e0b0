"""Makes ahead what the package tests need and keep under target/: the .deb
and .rpm (packages.py), the Debian root booted by systemd-nspawn (debroot.py)
and the container image (container_image.py). Mostly downloads and disk work:
scripts/test runs this in the background while clippy and the Rust tests use
the CPUs. The tests make whatever is missing or out of date themselves."""

import os
import sys
import traceback

import packages
from container_image import built_image
from debroot import SYSTEMD_ROOT, debian_root

if __name__ == "__main__":
    if os.geteuid() != 0:
        sys.exit(0)  # the tests that need these are skipped without root
    failed = False
    # The image needs the packages; the root needs neither.
    for step in (lambda: debian_root(SYSTEMD_ROOT), packages.built, built_image):
        try:
            print(step(), flush=True)
        except Exception:
            traceback.print_exc()
            failed = True
    sys.exit(1 if failed else 0)
