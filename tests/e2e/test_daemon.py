"""The daemon as a user meets it: config errors, signals, HTTP behaviour."""

import gzip
import subprocess

from daemon import BINARY, Metrics, gpu


def run_binary(*args, timeout=10):
    return subprocess.run([str(BINARY), *args], capture_output=True, text=True, timeout=timeout)


def test_bad_config_exits_2_naming_file_and_key(tmp_path):
    config = tmp_path / "bad.toml"
    config.write_text('[sampling]\nintervall = "1s"\n')
    r = run_binary("--config", str(config))
    assert r.returncode == 2
    assert str(config) in r.stderr
    assert "intervall" in r.stderr
    assert "line 2" in r.stderr


def test_bad_value_exits_2_naming_value(tmp_path):
    config = tmp_path / "bad.toml"
    config.write_text('[gpu]\ntimeout = "soon"\n')
    r = run_binary("--config", str(config))
    assert r.returncode == 2
    assert "soon" in r.stderr and str(config) in r.stderr


def test_missing_named_config_exits_2(tmp_path):
    r = run_binary("--config", str(tmp_path / "absent.toml"))
    assert r.returncode == 2
    assert "absent.toml" in r.stderr


def test_help_lists_the_options():
    r = run_binary("--help")
    assert r.returncode == 0
    for flag in ("--config", "--listen", "--log-format"):
        assert flag in r.stdout


def test_listen_flag_overrides_config(daemon_factory):
    from daemon import free_port

    d = daemon_factory({"gpus": [gpu(0)]})
    d.port = free_port()
    d.url = f"http://127.0.0.1:{d.port}"
    d.start(args=("--listen", f"127.0.0.1:{d.port}"))
    assert d.get("/healthz")[0] == 200


def test_gzip_when_asked(daemon_factory):
    d = daemon_factory({"gpus": [gpu(0)]}).start()
    status, headers, body = d.get("/metrics", headers={"Accept-Encoding": "gzip"})
    assert status == 200
    assert headers["Content-Encoding"] == "gzip"
    m = Metrics(gzip.decompress(body).decode())
    assert m.value("stallwatch_nvml_up") == 1


def test_unknown_route_is_404_and_healthz_is_json(daemon_factory):
    d = daemon_factory({"gpus": [gpu(0)]}).start()
    assert d.get("/nope")[0] == 404
    status, headers, body = d.get("/healthz")
    assert status == 200 and headers["Content-Type"] == "application/json"
    assert b'"status":"ok"' in body and b'"nvml":"up"' in body and b'"gpus":1' in body


def test_sigterm_exits_0(daemon_factory):
    d = daemon_factory({"gpus": [gpu(0)]}).start()
    assert d.stop() == 0
    assert "stopped" in d.logs()


def test_json_logs(daemon_factory, tmp_path):
    d = daemon_factory(library=tmp_path / "none.so").start(args=("--log-format", "json"))
    d.stop()
    import json

    lines = [json.loads(line) for line in d.logs().splitlines() if line.strip()]
    assert any(line.get("message") == "stallwatch started" for line in lines), lines
