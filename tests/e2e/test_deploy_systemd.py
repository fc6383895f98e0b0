"""The shipped systemd unit parses cleanly and keeps its hardening."""

import os
import re
import subprocess
from pathlib import Path

import pytest

from daemon import BINARY, TARGET
from unit_file import UNIT, unit_settings

# Overall exposure of the unit as `systemd-analyze security` scores it (0 best,
# 10 worst). The unit scores 2.1: what is left is what the daemon needs (an
# Internet listener, CAP_SYS_PTRACE and CAP_DAC_READ_SEARCH as ambient
# capabilities, the NVIDIA devices, the whole of /proc, no user namespace).
# 2.5 leaves room for rounding across systemd versions, and fails as soon as
# one more protection is dropped (each is worth 0.1 to 0.5).
MAX_EXPOSURE = 2.5


def unit_for(tmp_path):
    """A copy of the unit whose ExecStart is the binary built here, so that
    verify can check it exists and is executable."""
    assert BINARY.exists(), f"{BINARY} missing: run `cargo build --workspace` first"
    text = UNIT.read_text()
    assert "\nExecStart=/usr/bin/stallwatch\n" in text
    copy = tmp_path / "stallwatch.service"
    copy.write_text(text.replace("\nExecStart=/usr/bin/stallwatch\n", f"\nExecStart={BINARY}\n"))
    return copy


def analyze(*args, env=None):
    return subprocess.run(["systemd-analyze", *args], capture_output=True, text=True, timeout=60, env=env)


@pytest.fixture(scope="module")
def man_path(tmp_path_factory):
    """MANPATH with the man pages the packages ship, generated from the
    command line: verify runs `man` for each `Documentation=man:` page."""
    dist = tmp_path_factory.mktemp("dist")
    subprocess.run([str(TARGET / "xtask"), "dist-assets", str(dist)], check=True, timeout=60)
    return dict(os.environ, MANPATH=str(dist / "man"))


def test_unit_verifies_without_a_single_message(tmp_path, man_path):
    result = analyze("verify", str(unit_for(tmp_path)), env=man_path)
    # verify exits 0 on unknown keys and bad values: any output is a finding.
    assert result.returncode == 0, result.stderr
    assert result.stdout + result.stderr == ""


def test_verify_reports_a_misspelt_key(tmp_path, man_path):
    """The check above can fail: a typo in a hardening key is reported."""
    unit = unit_for(tmp_path)
    unit.write_text(unit.read_text().replace("ProtectHome=yes", "ProtectHome=yes\nProtectHomes=yes"))
    result = analyze("verify", str(unit), env=man_path)
    assert "Unknown key 'ProtectHomes'" in result.stdout + result.stderr


def test_verify_reports_a_missing_man_page(tmp_path):
    """The unit's Documentation= names man pages; without them verify says so."""
    result = analyze("verify", str(unit_for(tmp_path)), env=dict(os.environ, MANPATH=str(tmp_path)))
    assert "man stallwatch(1)" in result.stdout + result.stderr


def exposure(unit):
    result = analyze("security", "--offline=yes", str(unit))
    assert result.returncode == 0, result.stderr
    found = re.search(r"Overall exposure level for \S+: ([0-9.]+)", result.stdout)
    assert found, result.stdout
    return float(found.group(1)), result.stdout


def test_exposure_stays_under_the_threshold(tmp_path):
    score, report = exposure(unit_for(tmp_path))
    assert score <= MAX_EXPOSURE, report


def test_exposure_rises_when_hardening_is_dropped(tmp_path):
    unit = unit_for(tmp_path)
    baseline, _ = exposure(unit)
    text = unit.read_text()
    for key in ("ProtectSystem=strict", "NoNewPrivileges=yes", "RestrictNamespaces=yes"):
        text = text.replace(key + "\n", "")
    unit.write_text(text)
    score, report = exposure(unit)
    assert score > MAX_EXPOSURE >= baseline, report


def test_unit_keeps_proc_whole_and_bounds_capabilities_to_the_ambient_ones():
    """Hardening that would blind the daemon stays off; the bounding set is
    exactly the ambient set test_privileges.py runs the daemon with."""
    settings = unit_settings()
    assert settings["ProtectProc"] == ["default"], "invisible would hide other users' jobs"
    assert settings["ProcSubset"] == ["all"], "pid would hide /proc/stat, meminfo, pressure"
    assert "PrivateDevices" not in settings, "it would hide /dev/nvidia*"
    assert settings["Type"] == ["notify"] and settings["WatchdogSec"]
    assert set(settings["CapabilityBoundingSet"][0].split()) == set(settings["AmbientCapabilities"][0].split())


def test_unit_names_no_config_file_so_a_missing_one_means_defaults():
    """`--config PATH` makes a missing file an error (exit 2, no restart): the
    unit leaves it out so that the daemon reads /etc/stallwatch/config.toml
    when it is there and runs on the defaults when it is not."""
    assert unit_settings()["ExecStart"] == ["/usr/bin/stallwatch"]
