"""The Grafana files under grafana/: dashboards, their panels and queries, the
provisioned alert rules, and how Grafana fills in template variables."""

import json
import re
from pathlib import Path

import yaml

from daemon import ROOT

GRAFANA = ROOT / "grafana"
DASHBOARDS = sorted((GRAFANA / "dashboards").glob("*.json"))
ALERTING = GRAFANA / "provisioning" / "alerting" / "stallwatch.yml"
DATASOURCES = GRAFANA / "provisioning" / "datasources" / "stallwatch.yml"
PROVIDERS = GRAFANA / "provisioning" / "dashboards" / "stallwatch.yml"
RULES = ROOT / "deploy" / "prometheus" / "stallwatch.rules.yml"


def load_dashboard(path):
    return json.loads(Path(path).read_text())


def load_yaml(path):
    return yaml.safe_load(Path(path).read_text())


def panels(dashboard):
    """Every panel, those nested in collapsed rows included (rows themselves not)."""
    for panel in dashboard.get("panels", []):
        if panel.get("type") == "row":
            yield from panel.get("panels", [])
        else:
            yield panel


def targets(dashboard):
    """(panel, target) for every query of every panel."""
    for panel in panels(dashboard):
        for target in panel.get("targets", []):
            yield panel, target


def variable_queries(dashboard):
    """(name, PromQL label_values(...) text) of each query variable."""
    for var in dashboard.get("templating", {}).get("list", []):
        if var["type"] == "query":
            query = var["query"]
            yield var["name"], query["query"] if isinstance(query, dict) else query


def alert_queries(rules_file):
    """(rule, data item) for every alert-rule query sent to a data source."""
    for group in rules_file["groups"]:
        for rule in group["rules"]:
            for item in rule["data"]:
                if item["datasourceUid"] != "__expr__":
                    yield rule, item


VARIABLE = re.compile(r"\$\{(\w+)(?::\w+)?\}|\[\[(\w+)\]\]|\$(\w+)")


def substitute(expr, values):
    """Fills in $name, ${name} and [[name]] as Grafana does; an unknown name is an error."""

    def one(match):
        name = next(g for g in match.groups() if g)
        if name not in values:
            raise KeyError(f"no value for variable ${name} in: {expr}")
        return values[name]

    return VARIABLE.sub(one, expr)


def grafana_variables(range_s, scrape_s, instance, gpu, run=""):
    """The values Grafana gives its built-in variables for a dashboard range of
    range_s seconds with one point per scrape, plus the dashboards' own."""
    interval_s = scrape_s
    return {
        "__range": f"{range_s}s",
        "__range_s": str(range_s),
        "__range_ms": str(range_s * 1000),
        "__interval": f"{interval_s}s",
        "__interval_ms": str(interval_s * 1000),
        # max($__interval + scrape interval, 4 x scrape interval)
        "__rate_interval": f"{max(interval_s + scrape_s, 4 * scrape_s)}s",
        "instance": instance,
        "gpu": gpu,
        "run": run,
        "datasource": "stallwatch-prometheus",
    }
