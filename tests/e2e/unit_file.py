"""Settings of the shipped systemd unit, read the way systemd reads them."""

from daemon import ROOT

UNIT = ROOT / "deploy" / "systemd" / "stallwatch.service"


def unit_settings():
    """Every `Key=value` line of the unit, as {key: [values in order]}."""
    settings = {}
    for line in UNIT.read_text().splitlines():
        line = line.strip()
        if "=" in line and not line.startswith(("#", ";")):
            key, value = line.split("=", 1)
            settings.setdefault(key, []).append(value)
    return settings


def unit_capabilities():
    """The ambient capabilities the unit grants, e.g. ["sys_ptrace", ...]."""
    ambient = " ".join(unit_settings()["AmbientCapabilities"]).split()
    return sorted(cap.removeprefix("CAP_").lower() for cap in ambient)
