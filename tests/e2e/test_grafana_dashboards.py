"""The Grafana dashboards follow Grafana's own dashboard model: a JSON Schema
generated from the TypeScript types of the pinned @grafana/schema package
(tests/grafana), for the dashboard and for each panel plugin's options. The
schema is committed; a test regenerates it and compares."""

import copy
import functools
import json
import re
import subprocess
import urllib.parse

import pytest
from jsonschema import Draft7Validator

from daemon import ROOT
from grafana_files import (
    ALERTING, DASHBOARDS, DATASOURCES, PROVIDERS, load_dashboard, load_yaml, panels, targets,
)

SCHEMA_DIR = ROOT / "tests" / "grafana"
SCHEMA_FILE = SCHEMA_DIR / "schema" / "grafana.schema.json"


@functools.cache
def schema():
    return json.loads(SCHEMA_FILE.read_text())


def validator(definitions, name):
    return Draft7Validator({"$ref": f"#/definitions/{name}", "definitions": definitions})


def plugin_name(panel_type):
    """`state-timeline` -> `Statetimeline`, the prefix of its definitions."""
    return panel_type.replace("-", "").capitalize()


def problems(dashboard):
    """Every schema violation of the dashboard and of its panels' plugin options, as
    'path: message' lines; empty when it is valid."""
    definitions = schema()["definitions"]
    found = [
        f"{'/'.join(map(str, e.absolute_path))}: {e.message}"
        for e in validator(definitions, "GrafanaDashboard").iter_errors(dashboard)
    ]
    for panel in panels(dashboard):
        where = f"panel {panel.get('id')} {panel.get('title')!r} ({panel.get('type')})"
        plugin = plugin_name(str(panel.get("type")))
        if f"{plugin}Options" not in definitions:
            found.append(f"{where}: no schema for this panel type; add it to tests/grafana/schema-entry.ts")
            continue
        for e in validator(definitions, f"{plugin}Options").iter_errors(panel.get("options", {})):
            found.append(f"{where} options/{'/'.join(map(str, e.absolute_path))}: {e.message}")
        custom = panel.get("fieldConfig", {}).get("defaults", {}).get("custom")
        if f"{plugin}FieldConfig" in definitions:
            for e in validator(definitions, f"{plugin}FieldConfig").iter_errors(custom or {}):
                found.append(f"{where} custom/{'/'.join(map(str, e.absolute_path))}: {e.message}")
        elif custom:
            found.append(f"{where}: custom field config {custom} but the plugin has none")
    return found


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.name)
def test_dashboard_follows_grafanas_schema(path):
    found = problems(load_dashboard(path))
    assert not found, "\n".join(found)


def test_there_are_four_dashboards():
    assert [p.name for p in DASHBOARDS] == [
        "stallwatch-fleet.json", "stallwatch-gpu-hours.json", "stallwatch-host.json", "stallwatch-run.json",
    ]


def first(dashboard, panel_type):
    return next(p for p in panels(dashboard) if p["type"] == panel_type)


def drop_schema_version(d):
    del d["schemaVersion"]


def misspell_panels(d):
    d["panel"] = d.pop("panels")


def width_as_text(d):
    first(d, "timeseries")["gridPos"]["w"] = "12"


def unknown_variable_type(d):
    d["templating"]["list"][0]["type"] = "dropdown"


def legend_on_the_left(d):
    first(d, "timeseries")["options"]["legend"]["placement"] = "left"


def stat_without_reduce_options(d):
    del first(d, "stat")["options"]["reduceOptions"]


def table_column_alignment(d):
    first(d, "table")["fieldConfig"]["defaults"]["custom"]["align"] = "middle"


def unknown_panel_type(d):
    first(d, "bargauge")["type"] = "graph"  # the old panel, gone since Grafana 11


def panel_without_type(d):
    del first(d, "stat")["type"]


BROKEN = {
    drop_schema_version: "'schemaVersion' is a required property",
    misspell_panels: "'panel' was unexpected",
    width_as_text: "panels/",
    unknown_variable_type: "'dropdown' is not one of",
    legend_on_the_left: "'left' is not one of",
    stat_without_reduce_options: "'reduceOptions' is a required property",
    table_column_alignment: "'middle' is not one of",
    unknown_panel_type: "no schema for this panel type",
    panel_without_type: "panels/",
}


@pytest.mark.parametrize("mutate", BROKEN, ids=lambda f: f.__name__)
def test_schema_rejects_a_broken_dashboard(mutate):
    broken = copy.deepcopy(load_dashboard(DASHBOARDS[0]))
    mutate(broken)
    found = problems(broken)
    assert found, f"{mutate.__name__}: the broken dashboard passed"
    assert any(BROKEN[mutate] in line for line in found), found


def test_committed_schema_is_what_the_pinned_package_generates():
    node_modules = SCHEMA_DIR / "node_modules"
    assert node_modules.is_dir(), "tests/grafana/node_modules missing: run scripts/install-test-deps"
    r = subprocess.run(
        ["node", "generate-schema.mjs", "--stdout"],
        cwd=SCHEMA_DIR, capture_output=True, text=True, timeout=120,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout == SCHEMA_FILE.read_text(), (
        "tests/grafana/schema/grafana.schema.json differs from what @grafana/schema generates: "
        "run `node tests/grafana/generate-schema.mjs` and commit the result"
    )


# Units by the metric-name suffix of what a panel plots (gauges; counters go through rate()).
UNITS = {"ratio": "percentunit", "bytes": "bytes", "watts": "watt", "timestamp_seconds": "s"}
METRIC = re.compile(r"\b(stallwatch_\w+|\w+:stallwatch_\w+:\w+)\b")


def expected_unit(exprs):
    names = {m for e in exprs for m in METRIC.findall(e)}
    gauges = {n for n in names if ":" not in n and not n.endswith("_total") and not n.endswith("_info")}
    # In a job-panel join the right-hand side only selects; the left side is plotted.
    plotted = {n for n in gauges if not any(f"on (instance, pid) {n}" in e for e in exprs)}
    for suffix, unit in UNITS.items():
        if any(n.endswith("_" + suffix) for n in plotted):
            return unit
    return None


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.name)
def test_panels_use_the_unit_of_their_metrics(path):
    wrong = []
    for panel in panels(load_dashboard(path)):
        unit = panel["fieldConfig"]["defaults"].get("unit")
        want = expected_unit([t["expr"] for t in panel["targets"]])
        # Tables show labels; state timelines map values to names and colours.
        if panel["type"] not in ("table", "state-timeline") and unit is None:
            wrong.append(f"{panel['title']}: no unit")
        if want and unit != want:
            wrong.append(f"{panel['title']}: unit {unit}, its metrics want {want}")
    assert not wrong, "\n".join(wrong)


def documented_metrics():
    text = (ROOT / "docs" / "metrics.md").read_text()
    return set(re.findall(r"`(stallwatch_\w+)`", text))


def test_queries_use_documented_metrics_and_the_datasource_variable():
    known = documented_metrics()
    bad = []
    for path in DASHBOARDS:
        for panel, target in targets(load_dashboard(path)):
            raw = {n for n in METRIC.findall(target["expr"]) if ":" not in n}
            bad += [f"{path.name} {panel['title']}: {n} is not in docs/metrics.md" for n in raw - known]
            for ds in (panel["datasource"], target["datasource"]):
                if ds != {"type": "prometheus", "uid": "${datasource}"}:
                    bad.append(f"{path.name} {panel['title']}: datasource {ds}")
    for group in load_yaml(ALERTING)["groups"]:
        for rule in group["rules"]:
            for item in rule["data"]:
                expr = item["model"].get("expr", "")
                bad += [f"alert {rule['title']}: {n} undocumented" for n in set(METRIC.findall(expr)) - known]
    assert bad == []


def dashboard(name):
    return load_dashboard(next(p for p in DASHBOARDS if p.name == name))


# The raw series each fleet-wide view may read: the fleet's one, job info, is cut
# down to stalled jobs on the server.
FLEET_VIEWS = {"stallwatch-fleet.json": {"stallwatch_job_info"}, "stallwatch-gpu-hours.json": set()}


@pytest.mark.parametrize("name", FLEET_VIEWS)
def test_fleet_views_read_only_recording_rules(name):
    """At 10,000 GPUs the fleet views must not touch per-GPU series."""
    raw = {n for _, t in targets(dashboard(name)) for n in METRIC.findall(t["expr"]) if ":" not in n}
    assert raw <= FLEET_VIEWS[name]


def variable_names(d):
    return {v["name"] for v in d["templating"]["list"]}


def data_links(d):
    """(panel, link) for each link on a table column or a value."""
    for panel in panels(d):
        for override in panel["fieldConfig"].get("overrides", []):
            for prop in override["properties"]:
                if prop["id"] == "links":
                    for link in prop["value"]:
                        yield panel, link


def test_links_open_a_dashboard_with_the_variables_they_set():
    """A click on a host or a run in a table opens that one's dashboard with it chosen:
    the uid exists and has every variable the link sets."""
    by_uid = {d["uid"]: d for d in map(load_dashboard, DASHBOARDS)}
    bad, seen = [], 0
    for d in by_uid.values():
        for panel, link in data_links(d):
            where = f"{d['uid']} / {panel['title']}: {link['url']}"
            url = urllib.parse.urlsplit(link["url"])
            m = re.fullmatch(r"/d/([\w-]+)/[\w-]+", url.path)
            target = by_uid.get(m[1]) if m else None
            if target is None:
                bad.append(f"{where}: no such dashboard")
                continue
            seen += 1
            sets = {p.split("=")[0][len("var-"):] for p in url.query.split("&") if p.startswith("var-")}
            if sets - variable_names(target):
                bad.append(f"{where}: {target['uid']} has no variable {sorted(sets - variable_names(target))}")
    assert not bad, "\n".join(bad)
    assert seen >= 4


@pytest.mark.parametrize("source, variable", [("stallwatch-host.json", "instance"), ("stallwatch-run.json", "run")])
def test_host_and_run_dashboards_link_to_gpu_hours_and_back(source, variable):
    """The host's (the run's) dashboard opens the GPU-hours one with its host (run)
    chosen, where that variable filters the panels; the GPU-hours tables open the host's
    (run's) dashboard for a row."""
    d, gpu_hours = dashboard(source), dashboard("stallwatch-gpu-hours.json")
    [link] = [l for l in d["links"] if l["type"] == "link" and l["url"].startswith(f"/d/{gpu_hours['uid']}/")]
    assert link["includeVars"] and link["keepTime"]
    assert variable in variable_names(d) & variable_names(gpu_hours)
    filtered = [p["title"] for p, t in targets(gpu_hours) if f'{variable}=~"${variable}"' in t["expr"]]
    assert len(set(filtered)) >= 4, filtered
    back = [l["url"] for _, l in data_links(gpu_hours) if l["url"].startswith(f"/d/{d['uid']}/")]
    assert back and all(f"var-{variable}=${{__data.fields.{variable}}}" in u for u in back), back


def test_provisioning_files_fit_together():
    datasources = load_yaml(DATASOURCES)
    assert datasources["apiVersion"] == 1
    [ds] = datasources["datasources"]
    assert ds["type"] == "prometheus"
    providers = load_yaml(PROVIDERS)
    assert providers["apiVersion"] == 1
    assert providers["providers"][0]["type"] == "file"
    assert providers["providers"][0]["options"]["path"]
    dashboards = {load_dashboard(p)["uid"]: load_dashboard(p) for p in DASHBOARDS}
    for d in dashboards.values():
        var = next(v for v in d["templating"]["list"] if v["name"] == "datasource")
        assert var["type"] == "datasource" and var["query"] == "prometheus"
        assert var["current"]["value"] == ds["uid"]
        ids = [p["id"] for p in d["panels"]]
        assert len(ids) == len(set(ids)), f"{d['uid']}: panel ids repeat"
    alerting = load_yaml(ALERTING)
    assert alerting["apiVersion"] == 1
    uids = []
    for group in alerting["groups"]:
        assert {"orgId", "name", "folder", "interval", "rules"} <= set(group)
        for rule in group["rules"]:
            uids.append(rule["uid"])
            refs = [item["refId"] for item in rule["data"]]
            assert rule["condition"] in refs, rule["title"]
            for item in rule["data"]:
                assert item["model"]["refId"] == item["refId"]
                if item["datasourceUid"] == "__expr__":
                    assert item["model"]["expression"] in refs
                else:
                    assert item["datasourceUid"] == ds["uid"], rule["title"]
                    assert item["relativeTimeRange"]["from"] > item["relativeTimeRange"]["to"]
            assert rule["noDataState"] in {"OK", "NoData", "Alerting", "KeepLast"}
            assert rule["execErrState"] in {"OK", "Error", "Alerting", "KeepLast"}
            if "dashboardUid" in rule:
                panel_ids = [p["id"] for p in panels(dashboards[rule["dashboardUid"]])]
                assert rule["panelId"] in panel_ids, rule["title"]
    assert len(uids) == len(set(uids))
