"""The .deb and .rpm made by scripts/package from the dev build the test run
already has (the release build is the same code and takes minutes longer).
Made again only when something they are made from is newer than they are, so
that scripts/test can make them early, in the background."""

import functools
import subprocess

from daemon import ROOT, TARGET

CARGO_TARGET = TARGET.parent

# What goes into the packages besides the two binaries.
INPUTS = [
    "Cargo.toml",
    "crates/server/Cargo.toml",
    "config.example.toml",
    "README.md",
    "docs",
    "deploy/debian",
    "deploy/rpm",
    "deploy/systemd",
    "scripts/package",
]


def newest_input():
    paths = [TARGET / "stallwatch", TARGET / "xtask"]
    for name in INPUTS:
        p = ROOT / name
        paths.extend(p.rglob("*") if p.is_dir() else [p])
    return max(p.stat().st_mtime for p in paths if p.is_file())


def existing():
    debs = list(CARGO_TARGET.glob("debian/stallwatch_*.deb"))
    rpms = list(CARGO_TARGET.glob("generate-rpm/stallwatch-*.rpm"))
    if len(debs) == 1 and len(rpms) == 1:
        return {"deb": debs[0], "rpm": rpms[0]}
    return None


@functools.cache
def built():
    """{"deb": path, "rpm": path}"""
    found = existing()
    if found and min(p.stat().st_mtime for p in found.values()) > newest_input():
        return found
    for old in [*CARGO_TARGET.glob("debian/*.deb"), *CARGO_TARGET.glob("generate-rpm/*.rpm")]:
        old.unlink()
    result = subprocess.run(
        [str(ROOT / "scripts" / "package"), "--profile", "dev", "--no-build"],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert result.returncode == 0, f"scripts/package failed:\n{result.stdout}\n{result.stderr}"
    found = existing()
    assert found, "scripts/package made no .deb and .rpm"
    return found


def workspace_version():
    for line in (ROOT / "Cargo.toml").read_text().splitlines():
        if line.startswith("version = "):
            return line.split('"')[1]
    raise AssertionError("no version in Cargo.toml")
