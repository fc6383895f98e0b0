"""Several stallwatch daemons as the hosts of a fleet, a real Prometheus evaluating the
shipped rules with their windows scaled from minutes to seconds, and what the tests of
runs ask of it: alerts firing, `stallwatch fleet`'s answer."""

import json
import re
import subprocess

import yaml

from daemon import BINARY, ROOT, free_port, gpu, http_get, poll

RULES = ROOT / "deploy" / "prometheus" / "stallwatch.rules.yml"
# Windows of seconds, warm-up 6 s, hang time 3 s.
HANG_FAST = '[diagnosis]\ntime_scale = 0.05\nhang_min = "1m"\n'
RUN_RULES = ROOT / "deploy" / "prometheus" / "stallwatch.runs.yml"


# Shipped durations are scaled by 1/30 (1m -> 2s) unless a test says otherwise: a test
# sees in a minute what a fleet sees in half an hour.
SCALE = 30


def scaled(duration, scale=SCALE):
    """A Prometheus duration (`2m`, `30s`) divided by `scale`, in whole seconds (at least 1)."""
    n, unit = int(duration[:-1]), duration[-1]
    seconds = n * {"s": 1, "m": 60, "h": 3600}[unit]
    return f"{max(1, round(seconds / scale))}s"


def scaled_rules(tmp_path, scale=SCALE):
    """The shipped rule files with their windows and `for:` divided by `scale`."""
    out = []
    for path in (RULES, RUN_RULES):
        text = path.read_text()
        text = re.sub(r"\[(\d+[smh])\]", lambda m: f"[{scaled(m.group(1), scale)}]", text)
        text = re.sub(r"for: (\d+[smh])",
                      lambda m: f"for: {scaled(m.group(1), scale)}" if m.group(1) != "0s" else "for: 0s", text)
        copy = tmp_path / path.name
        copy.write_text(text)
        out.append(str(copy))
    return out


class Hosts:
    """Daemons as hosts: each on its own loopback address (127.0.0.2, .3, ...) and the
    same port, so that Prometheus's `instance` tells them apart and `stallwatch fleet`
    finds each at instance:port, as in a fleet."""

    def __init__(self, daemon_factory, count, config="", uuid="GPU-00000000-0000-0000-0000-00000000000{gpu}"):
        self.port = free_port()
        self.daemons = []
        for i in range(count):
            idle = [gpu(g, utilization_gpu=0, uuid=uuid.format(host=i, gpu=g)) for g in (0, 1)]
            d = daemon_factory({"gpus": idle}, config=config)
            address = f"127.0.0.{2 + i}"
            d.config_path.write_text(
                d.config_path.read_text().replace(f"127.0.0.1:{d.port}", f"{address}:{self.port}")
            )
            d.port, d.url, d.address = self.port, f"http://{address}:{self.port}", address
            self.daemons.append(d.start())

    def targets(self):
        return [f"{d.address}:{self.port}" for d in self.daemons]


def prometheus_config(targets, rule_files):
    config = yaml.safe_load((ROOT / "deploy" / "prometheus" / "prometheus.yml").read_text())
    config["global"].update(scrape_interval="1s", scrape_timeout="900ms", evaluation_interval="1s")
    del config["alerting"]
    config["rule_files"] = rule_files
    (job,) = config["scrape_configs"]
    job.pop("file_sd_configs")
    job.update(scrape_timeout="900ms", static_configs=[{"targets": targets}])
    return yaml.safe_dump(config)


def firing(base, alertname):
    """The firing alerts named `alertname`, or whose name it accepts (a function)."""
    named = alertname if callable(alertname) else alertname.__eq__
    status, _, body = http_get(base + "/api/v1/alerts")
    alerts = json.loads(body)["data"]["alerts"] if status == 200 else []
    return [a for a in alerts if named(a["labels"]["alertname"]) and a["state"] == "firing"]


def wait_firing(base, alertname, timeout=60):
    return poll(lambda: firing(base, alertname), f"{alertname} not firing within {timeout} s", timeout)


def fleet(base, port, *args):
    out = subprocess.run([str(BINARY), "fleet", "--prometheus", base, "--daemon-port", str(port), *args],
                         capture_output=True, text=True, timeout=60)
    return out
