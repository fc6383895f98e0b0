"""The Kubernetes manifests: valid for the API server (strict schemas of the
core kinds, the prometheus-operator CRD schemas for ServiceMonitor and
PrometheusRule), the PrometheusRule in step with the rule file, and the pieces
consistent with each other, the daemon and the systemd unit."""

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from daemon import BINARY, ROOT, free_port, http_get
from unit_file import unit_capabilities

K8S = ROOT / "deploy" / "kubernetes"
CORE = ["namespace.yaml", "configmap.yaml", "daemonset.yaml", "service.yaml"]
RULES = ROOT / "deploy" / "prometheus" / "stallwatch.rules.yml"
GENERATED = K8S / "prometheusrule.yaml"
GENERATOR = ROOT / "scripts" / "gen-prometheusrule"
CRD_VALIDATOR = ROOT / "tests" / "crd" / "validate.mjs"
VALIDATE = Path(sys.executable).with_name("kubernetes-validate")
# The oldest and the newest Kubernetes versions kubernetes-validate knows.
VERSIONS = ["1.25.0", "1.37.0"]


def load(name):
    return yaml.safe_load((K8S / name).read_text())


def kubernetes_validate(paths):
    args = [str(VALIDATE), "--strict"]
    for version in VERSIONS:
        args += ["-k", version]
    return subprocess.run([*args, *map(str, paths)], capture_output=True, text=True, timeout=120)


def crd_validate(docs):
    return subprocess.run(
        ["node", str(CRD_VALIDATOR)], input=json.dumps(docs), capture_output=True, text=True, timeout=60
    )


def generate(*args):
    return subprocess.run([sys.executable, str(GENERATOR), *map(str, args)], capture_output=True, text=True, timeout=60)


def test_core_manifests_pass_strict_validation():
    r = kubernetes_validate([K8S / name for name in CORE])
    assert r.returncode == 0, r.stdout + r.stderr
    passed = [line for line in r.stdout.splitlines() if line.startswith("INFO") and "passed" in line]
    assert len(passed) == len(CORE) * len(VERSIONS), r.stdout
    assert "WARN" not in r.stdout and "ERROR" not in r.stdout, r.stdout


def test_strict_validation_rejects_a_misspelt_field(tmp_path):
    bad = tmp_path / "daemonset.yaml"
    bad.write_text((K8S / "daemonset.yaml").read_text().replace("readOnlyRootFilesystem", "readOnlyRootFileSystem"))
    r = kubernetes_validate([bad])
    assert r.returncode != 0 and "readOnlyRootFileSystem" in r.stdout, r.stdout


def test_service_monitor_passes_the_crd_schema():
    r = crd_validate([load("servicemonitor.yaml")])
    assert r.returncode == 0 and r.stdout == "ok ServiceMonitor/stallwatch\n", r.stdout + r.stderr


def test_crd_schema_rejects_a_bad_service_monitor():
    monitor = load("servicemonitor.yaml")
    monitor["spec"]["endpoints"][0]["interval"] = "15 seconds"
    del monitor["spec"]["selector"]
    r = crd_validate([monitor])
    assert r.returncode == 1
    assert "interval must match pattern" in r.stdout, r.stdout
    assert "required property selector" in r.stdout, r.stdout


def test_kustomization_lists_every_manifest():
    listed = set(load("kustomization.yaml")["resources"])
    present = {p.name for p in K8S.glob("*.yaml")} - {"kustomization.yaml"}
    assert present | {GENERATED.name} == listed


def test_generated_prometheus_rule_matches_the_rule_file(tmp_path):
    if not RULES.exists():
        pytest.skip(f"{RULES.relative_to(ROOT)} is not in this tree yet")
    r = generate("--check")
    assert r.returncode == 0, r.stderr
    r = crd_validate([yaml.safe_load(GENERATED.read_text())])
    assert r.returncode == 0, r.stdout


def test_generator_wraps_the_groups_and_detects_drift(tmp_path):
    rules = tmp_path / "stallwatch.rules.yml"
    groups = [
        {
            "name": "stallwatch.recording",
            "rules": [
                {
                    "record": "instance_verdict:stallwatch_gpu_verdict:sum",
                    "expr": "sum by (instance, verdict) (stallwatch_gpu_verdict)",
                },
                {
                    "record": "instance_pid_comm:stallwatch_job_stalled_gpus:count",
                    "expr": "count by (instance, pid, comm) (\n  stallwatch_process_gpu_memory_bytes\n"
                    '  and on (instance, gpu) (stallwatch_gpu_verdict{verdict="stalled"} == 1)\n)\n',
                },
            ],
        },
        {
            "name": "stallwatch.alerts",
            "rules": [
                {
                    "alert": "StallwatchGpuStalled",
                    "expr": "instance:stallwatch_gpus_stalled:sum > 0",
                    "for": "15m",
                    "labels": {"severity": "warning"},
                    "annotations": {"summary": "{{ $labels.instance }}: {{ $value }} GPUs stalled"},
                },
            ],
        },
    ]
    rules.write_text(yaml.safe_dump({"groups": groups}))
    out = tmp_path / "prometheusrule.yaml"
    assert generate("--rules", rules, "--out", out, "--check").returncode == 1, "missing output is drift"
    r = generate("--rules", rules, "--out", out)
    assert r.returncode == 0, r.stderr
    text = out.read_text()
    assert text.startswith("# Generated by scripts/gen-prometheusrule")
    assert "expr: |" in text, "multi-line PromQL stays readable"
    resource = yaml.safe_load(text)
    assert resource["kind"] == "PrometheusRule" and resource["spec"]["groups"] == groups
    assert crd_validate([resource]).returncode == 0
    assert generate("--rules", rules, "--out", out, "--check").returncode == 0
    groups[1]["rules"][0]["for"] = "30m"
    rules.write_text(yaml.safe_dump({"groups": groups}))
    r = generate("--rules", rules, "--out", out, "--check")
    assert r.returncode == 1 and str(out) in r.stderr and "run scripts/gen-prometheusrule" in r.stderr
    assert generate("--rules", tmp_path / "none.yml", "--out", out).returncode != 0


def test_daemonset_capabilities_are_the_units():
    """All but CAP_SYSLOG: a container has no /dev/kmsg to read (docs/deploy.md)."""
    container = load("daemonset.yaml")["spec"]["template"]["spec"]["containers"][0]
    caps = container["securityContext"]["capabilities"]
    assert caps["drop"] == ["ALL"]
    assert sorted(cap.lower() for cap in caps["add"]) == [c for c in unit_capabilities() if c != "syslog"]


def test_daemonset_may_read_the_hosts_jobs_stacks():
    """The host's PID namespace, CAP_SYS_PTRACE and no AppArmor profile: a
    runtime's default profile would let it read only its own profile's
    processes (docs/deploy.md#reading-the-jobs-stacks)."""
    template = load("daemonset.yaml")["spec"]["template"]
    pod = template["spec"]
    (container,) = pod["containers"]
    assert pod["hostPID"] is True
    assert "SYS_PTRACE" in container["securityContext"]["capabilities"]["add"]
    annotation = f"container.apparmor.security.beta.kubernetes.io/{container['name']}"
    assert template["metadata"]["annotations"][annotation] == "unconfined"


def test_daemonset_mounts_the_configured_pod_resources_socket():
    """The kubelet's socket directory from the host, read-only, where the ConfigMap's
    kubernetes.pod_resources_socket points; and the ServiceMonitor leaves the jobs'
    namespace, pod and container labels as they are."""
    config = load("configmap.yaml")["data"]["config.toml"]
    socket = config.split('pod_resources_socket = "', 1)[1].split('"', 1)[0]
    pod = load("daemonset.yaml")["spec"]["template"]["spec"]
    (mount,) = [m for m in pod["containers"][0]["volumeMounts"] if m["name"] == "pod-resources"]
    (volume,) = [v for v in pod["volumes"] if v["name"] == "pod-resources"]
    assert mount["readOnly"] is True
    assert socket.rsplit("/", 1)[0] == mount["mountPath"] == volume["hostPath"]["path"]
    relabelings = load("servicemonitor.yaml")["spec"]["endpoints"][0]["relabelings"]
    assert {"action": "labeldrop", "regex": "(namespace|pod|container)"} in relabelings


def test_probes_service_and_monitor_point_at_the_configured_listener():
    config = load("configmap.yaml")["data"]["config.toml"]
    port = int(config.split('listen = "', 1)[1].split('"', 1)[0].rsplit(":", 1)[1])
    pod = load("daemonset.yaml")["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert container["ports"] == [{"name": "metrics", "containerPort": port, "protocol": "TCP"}]
    for probe in ("livenessProbe", "readinessProbe"):
        assert container[probe]["httpGet"] == {"path": "/healthz", "port": port}
    mount = container["volumeMounts"][0]["mountPath"]
    assert container["command"][-2:] == ["--config", f"{mount}/config.toml"]
    service = load("service.yaml")["spec"]
    assert service["ports"][0]["name"] == "metrics" and service["ports"][0]["port"] == port
    assert load("servicemonitor.yaml")["spec"]["endpoints"][0]["port"] == "metrics"


def test_daemon_starts_with_the_configmaps_config(tmp_path):
    """The ConfigMap's config.toml is one the daemon accepts: it comes up
    healthy (here without NVML, as on a node whose driver is not ready)."""
    config = tmp_path / "config.toml"
    config.write_text(load("configmap.yaml")["data"]["config.toml"])
    port = free_port()
    log = open(tmp_path / "daemon.log", "wb")
    p = subprocess.Popen(
        [str(BINARY), "--config", str(config), "--listen", f"127.0.0.1:{port}"], stdout=log, stderr=subprocess.STDOUT
    )
    try:
        deadline = time.monotonic() + 15
        status = None
        while time.monotonic() < deadline and p.poll() is None:
            try:
                status, _, _ = http_get(f"http://127.0.0.1:{port}/healthz", timeout=1)
            except OSError:
                pass
            if status == 200:
                break
            time.sleep(0.1)
        assert status == 200, (tmp_path / "daemon.log").read_text()
    finally:
        p.send_signal(signal.SIGTERM)
        assert p.wait(timeout=10) == 0
        log.close()
