"""The container image made by scripts/build-image from the .deb, in the
tests' own container storage (target/containers), made again when the .deb or
the script changes.

podman and buildah get the tests' own storage.conf and containers.conf, never
the host's: runc as the runtime (crun is not installed), cgroupfs (no systemd
on the host), and default_ulimits, because this machine's bounding set lacks
CAP_SYS_RESOURCE, so runc cannot raise the limits to podman's default, the
host's maximum (runc create fails with "error setting rlimit type 7")."""

import hashlib
import os
import subprocess

import packages
from daemon import ROOT
from debroot import locked

STORE = packages.CARGO_TARGET / "containers"
CONTAINERS_CONF = """\
[containers]
default_ulimits = ["nofile=4096:4096", "nproc=4096:4096"]
[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
"""


def podman_env():
    STORE.mkdir(parents=True, exist_ok=True)
    (STORE / "containers.conf").write_text(CONTAINERS_CONF)
    (STORE / "storage.conf").write_text(
        f'[storage]\ndriver = "overlay"\ngraphroot = "{STORE / "storage"}"\nrunroot = "{STORE / "run"}"\n'
    )
    return dict(
        os.environ,
        CONTAINERS_CONF=str(STORE / "containers.conf"),
        CONTAINERS_STORAGE_CONF=str(STORE / "storage.conf"),
    )


def built_image():
    """The image's tag, as scripts/build-image printed it."""
    env = podman_env()
    deb = packages.built()["deb"]
    key = hashlib.sha256(deb.read_bytes() + (ROOT / "scripts/build-image").read_bytes()).hexdigest()
    marker = STORE / "image.built"
    with locked(STORE / "image.lock"):
        if marker.exists():
            made_for, tag = marker.read_text().split()
            exists = subprocess.run(["podman", "image", "exists", tag], env=env).returncode == 0
            if made_for == key and exists:
                return tag
        result = subprocess.run(
            [str(ROOT / "scripts/build-image"), "--deb", str(deb)],
            env=env,
            capture_output=True,
            text=True,
            timeout=1200,
        )
        assert result.returncode == 0, result.stderr[-4000:]
        tag = result.stdout.strip().splitlines()[-1]
        marker.write_text(f"{key} {tag}\n")
        return tag
