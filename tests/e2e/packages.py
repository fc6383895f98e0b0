"""The .deb and .rpm made by scripts/package from the dev build the test run
already has (the release build is the same code and takes minutes longer).
Built once per test session."""

import functools
import subprocess
from pathlib import Path

from daemon import ROOT, TARGET

CARGO_TARGET = TARGET.parent


@functools.cache
def built():
    """{"deb": path, "rpm": path}"""
    for old in [*CARGO_TARGET.glob("debian/*.deb"), *CARGO_TARGET.glob("generate-rpm/*.rpm")]:
        old.unlink()
    result = subprocess.run(
        [str(ROOT / "scripts" / "package"), "--profile", "dev", "--no-build"],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert result.returncode == 0, f"scripts/package failed:\n{result.stdout}\n{result.stderr}"
    (deb,) = CARGO_TARGET.glob("debian/stallwatch_*.deb")
    (rpm,) = CARGO_TARGET.glob("generate-rpm/stallwatch-*.rpm")
    return {"deb": Path(deb), "rpm": Path(rpm)}


def workspace_version():
    for line in (ROOT / "Cargo.toml").read_text().splitlines():
        if line.startswith("version = "):
            return line.split('"')[1]
    raise AssertionError("no version in Cargo.toml")
