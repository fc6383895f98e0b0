"""Minimal Debian roots made with mmdebstrap from Debian's archive, kept under
target/debroot between runs (a fresh machine builds them: about 1.5 minutes
each). `python tests/e2e/debroot.py` builds them ahead of the tests."""

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CACHE = Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target")) / "debroot"
SUITE = "bookworm"
MIRROR = os.environ.get("STALLWATCH_DEBIAN_MIRROR", "http://deb.debian.org/debian")

# The root the packaged unit is booted in: systemd as init and nothing more
# (dpkg, deb-systemd-helper and the shell are in the essential set).
SYSTEMD_ROOT = {"name": "systemd", "variant": "essential", "include": ["systemd"]}

# Debian's own CPythons, each in a root of its release, for the stack tests
# (test_pythons.py): name -> (suite, the interpreter's command, its version).
PYTHON_ROOTS = {
    "bullseye": ("bullseye", "python3", "3.9"),
    "bookworm": ("bookworm", "python3", "3.11"),
    "trixie": ("trixie", "python3", "3.13"),
    "sid-3.14": ("sid", "python3.14", "3.14"),
    "sid-3.15": ("sid", "python3.15", "3.15"),
}


def python_root_spec(suite):
    """The root of `suite` with its CPythons (sid's two in one root)."""
    commands = sorted({c for s, c, _ in PYTHON_ROOTS.values() if s == suite})
    packages = ["python3" if c == "python3" else c for c in commands]
    return {"name": f"python-{suite}", "suite": suite, "variant": "essential", "include": packages}


@contextmanager
def locked(path):
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        yield


def debian_root(spec):
    """The path of a root made from `spec`, built once and then reused. A
    root is complete once it is renamed into place, so an interrupted build is
    started again."""
    suite = spec.get("suite", SUITE)
    key = hashlib.sha256(json.dumps([SUITE, MIRROR, spec], sort_keys=True).encode()).hexdigest()[:12]
    path = CACHE / f"{spec['name']}-{suite}-{key}"
    if path.is_dir():
        return path
    with locked(CACHE / f"{spec['name']}.lock"):
        if path.is_dir():
            return path
        for old in CACHE.glob(f"{spec['name']}-*"):
            shutil.rmtree(old, ignore_errors=True)
        partial = CACHE / f"{spec['name']}-partial"
        command = [
            "mmdebstrap",
            "--mode=root",
            f"--variant={spec['variant']}",
            f"--include={','.join(spec['include'])}",
            # The archive's snapshot of sid is past its Release's Valid-Until.
            "--aptopt=Acquire::Check-Valid-Until \"false\"",
            suite,
            str(partial),
            MIRROR,
        ]
        result = subprocess.run(command, capture_output=True, text=True, timeout=1200)
        assert result.returncode == 0, f"{' '.join(command)} failed:\n{result.stderr[-4000:]}"
        partial.rename(path)
    return path


if __name__ == "__main__":
    print(debian_root(SYSTEMD_ROOT), file=sys.stderr)
    for suite in sorted({s for s, _, _ in PYTHON_ROOTS.values()}):
        print(debian_root(python_root_spec(suite)), file=sys.stderr)
