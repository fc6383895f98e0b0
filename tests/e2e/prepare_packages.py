"""Makes ahead what the package tests need and keep under target/: the .deb
and .rpm (packages.py), the Debian root booted by systemd-nspawn and the roots
with Debian's CPythons for test_pythons.py (debroot.py)
and the container image (container_image.py). Mostly downloads and disk work:
scripts/test runs this in the background while clippy and the Rust tests use
the CPUs. The tests make whatever is missing or out of date themselves."""

import os
import sys
import traceback

import packages
from container_image import built_image
from debroot import PYTHON_ROOTS, SYSTEMD_ROOT, debian_root, python_root_spec

if __name__ == "__main__":
    if os.geteuid() != 0:
        sys.exit(0)  # the tests that need these are skipped without root
    failed = False
    # The image needs the packages; the roots need neither.
    pythons = [lambda s=s: debian_root(python_root_spec(s)) for s in sorted({s for s, _, _ in PYTHON_ROOTS.values()})]
    for step in (lambda: debian_root(SYSTEMD_ROOT), *pythons, packages.built, built_image):
        try:
            print(step(), flush=True)
        except Exception:
            traceback.print_exc()
            failed = True
    sys.exit(1 if failed else 0)
