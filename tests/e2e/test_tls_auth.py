"""TLS and basic auth from a Prometheus exporters' web config file, checked with real TLS
clients (Python ssl, curl, openssl s_client) and a real Prometheus, with certificates
made here by the openssl command."""

import base64
import os
import ssl
import subprocess
import time
import urllib.error
import urllib.request

import pytest

from daemon import BINARY, Metrics, gpu, http_get
from test_prometheus import prometheus, wait_query  # noqa: F401 (fixture)

SCENARIO = {"gpus": [gpu(0, utilization_gpu=42)]}
USER, PASSWORD = "prometheus", "s3cret"
# bcrypt of PASSWORD at cost 10, as `htpasswd -nbB` writes it.
HASH = "$2y$10$oGDU.u.oEdSnW58w5qM7JukbWsPRBeaI3kuYwU1jBoZ7eQHeYuZGC"
NEW_PASSWORD = "stallwatch"
NEW_HASH = "$2b$10$5Q7awWuCqIfDDsVyP3psxOB4RN3GXwtmW7GHRHFDYVSMU6bMyd32C"


def openssl(*args):
    subprocess.run(["openssl", *args], check=True, capture_output=True)


def make_key(d, name):
    openssl("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256",
            "-out", str(d / f"{name}.key"))


def make_ca(d, name):
    make_key(d, name)
    openssl("req", "-x509", "-new", "-key", str(d / f"{name}.key"), "-out",
            str(d / f"{name}.crt"), "-days", "2", "-subj", f"/CN=stallwatch test {name}")


def make_cert(d, ca, name, ext):
    make_key(d, name)
    (d / f"{name}.ext").write_text(ext + "\n")
    openssl("req", "-new", "-key", str(d / f"{name}.key"), "-out", str(d / f"{name}.csr"),
            "-subj", f"/CN={name}")
    openssl("x509", "-req", "-in", str(d / f"{name}.csr"), "-CA", str(d / f"{ca}.crt"),
            "-CAkey", str(d / f"{ca}.key"), "-CAcreateserial", "-days", "2",
            "-extfile", str(d / f"{name}.ext"), "-out", str(d / f"{name}.crt"))


SERVER_EXT = "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth"


@pytest.fixture
def pki(tmp_path):
    """A CA, a server certificate for 127.0.0.1 and a client certificate, all EC P-256."""
    d = tmp_path / "pki"
    d.mkdir()
    make_ca(d, "ca")
    make_cert(d, "ca", "server", SERVER_EXT)
    make_cert(d, "ca", "client", "extendedKeyUsage=clientAuth")
    return d


def web_config(d, pki, tls_extra="", password_hash=HASH):
    path = d.dir / "web-config.yml"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(
        "tls_server_config:\n"
        f"  cert_file: {pki / 'server.crt'}\n"
        f"  key_file: {pki / 'server.key'}\n"
        + tls_extra
        + f"basic_auth_users:\n  {USER}: {password_hash}\n"
    )
    os.replace(tmp, path)
    return path


def context(pki, client_cert=False):
    ctx = ssl.create_default_context(cafile=str(pki / "ca.crt"))
    if client_cert:
        ctx.load_cert_chain(str(pki / "client.crt"), str(pki / "client.key"))
    return ctx


def auth_header(user=USER, password=PASSWORD):
    token = base64.b64encode(f"{user}:{password}".encode()).decode()
    return {"Authorization": f"Basic {token}"}


def https_get(d, path, ctx, headers=None):
    request = urllib.request.Request(f"https://127.0.0.1:{d.port}{path}", headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=5, context=ctx) as r:
            return r.status, r.headers, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.headers, e.read()


def wait_until(check, what, timeout=10):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if check():
                return
        except OSError:
            pass
        time.sleep(0.2)
    raise AssertionError(f"not within {timeout}s: {what}")


def start_tls(d, pki, tls_extra="", client_cert=False):
    path = web_config(d, pki, tls_extra)
    d.start(wait=False, args=["--web.config.file", str(path)])
    ctx = context(pki, client_cert)

    def healthy():
        assert d.process.poll() is None, d.logs()
        return https_get(d, "/healthz", ctx, auth_header())[0] == 200

    wait_until(healthy, "daemon healthy over TLS", timeout=15)
    return ctx


def test_basic_auth_over_tls(daemon_factory, pki):
    d = daemon_factory(SCENARIO)
    ctx = start_tls(d, pki)
    status, headers, body = https_get(d, "/metrics", ctx, auth_header())
    assert status == 200
    assert Metrics(body.decode()).value("stallwatch_gpu_utilization_ratio", gpu=0) == 0.42
    for headers in ({}, auth_header(password="wrong"), auth_header(user="nobody")):
        for path in ("/metrics", "/healthz", "/api/v1/status"):
            status, answer, _ = https_get(d, path, ctx, headers)
            assert status == 401, (path, headers)
            assert answer["WWW-Authenticate"].startswith("Basic "), answer


def test_curl_and_openssl_clients(daemon_factory, pki):
    d = daemon_factory(SCENARIO)
    start_tls(d, pki, "  min_version: TLS13\n")
    url = f"https://127.0.0.1:{d.port}/metrics"
    out = subprocess.run(
        ["curl", "-sS", "--cacert", str(pki / "ca.crt"), "-u", f"{USER}:{PASSWORD}", url],
        capture_output=True, text=True, timeout=10,
    )
    assert out.returncode == 0, out.stderr
    assert "stallwatch_gpu_up" in out.stdout
    out = subprocess.run(
        ["curl", "-sS", "-o", "/dev/null", "-w", "%{http_code}", "--cacert",
         str(pki / "ca.crt"), "-u", f"{USER}:nope", url],
        capture_output=True, text=True, timeout=10,
    )
    assert out.stdout == "401"

    def s_client(*flags):
        return subprocess.run(
            ["openssl", "s_client", "-connect", f"127.0.0.1:{d.port}", "-CAfile",
             str(pki / "ca.crt"), "-verify_return_error", *flags],
            input="", capture_output=True, text=True, timeout=10,
        )

    tls13 = s_client("-tls1_3")
    assert "Protocol  : TLSv1.3" in tls13.stdout or "TLSv1.3" in tls13.stdout, tls13.stdout
    assert "Verify return code: 0 (ok)" in tls13.stdout
    # min_version: TLS13 refuses a TLS 1.2 handshake.
    tls12 = s_client("-tls1_2")
    assert tls12.returncode != 0
    assert "Cipher is (NONE)" in tls12.stdout or "alert" in tls12.stderr, tls12


def test_plain_http_to_the_tls_port_fails_cleanly(daemon_factory, pki):
    d = daemon_factory(SCENARIO)
    start_tls(d, pki)
    status, _, body = http_get(f"http://127.0.0.1:{d.port}/metrics", auth_header())
    assert status == 400
    assert b"HTTP request to an HTTPS server" in body
    # A client that trusts another CA is refused by its own verification.
    with pytest.raises(urllib.error.URLError) as e:
        https_get(d, "/metrics", ssl.create_default_context(), auth_header())
    assert isinstance(e.value.reason, ssl.SSLCertVerificationError)


def test_client_certificates_are_required_and_verified(daemon_factory, pki):
    d = daemon_factory(SCENARIO)
    extra = (
        "  client_auth_type: RequireAndVerifyClientCert\n"
        f"  client_ca_file: {pki / 'ca.crt'}\n"
    )
    ctx = start_tls(d, pki, extra, client_cert=True)
    assert https_get(d, "/metrics", ctx, auth_header())[0] == 200
    with pytest.raises((ssl.SSLError, urllib.error.URLError, ConnectionResetError)):
        https_get(d, "/metrics", context(pki), auth_header())
    out = subprocess.run(
        ["curl", "-sS", "--cacert", str(pki / "ca.crt"), "-u", f"{USER}:{PASSWORD}",
         f"https://127.0.0.1:{d.port}/metrics"],
        capture_output=True, text=True, timeout=10,
    )
    assert out.returncode != 0 and "stallwatch_gpu_up" not in out.stdout


def test_bad_web_config_exits_2_naming_file_and_key(daemon_factory, pki, tmp_path):
    d = daemon_factory(SCENARIO)
    path = web_config(d, pki, "  min_version: TLS10\n")
    out = subprocess.run(
        [str(BINARY), "--config", str(d.config_path), "--web.config.file", str(path)],
        capture_output=True, text=True, timeout=10,
    )
    assert out.returncode == 2
    assert str(path) in out.stderr and "tls_server_config.min_version" in out.stderr, out.stderr
    path.write_text("tls_server_config:\n  certfile: x\n")
    out = subprocess.run(
        [str(BINARY), "--config", str(d.config_path), "--web.config.file", str(path)],
        capture_output=True, text=True, timeout=10,
    )
    assert out.returncode == 2
    assert str(path) in out.stderr and "certfile" in out.stderr, out.stderr


def test_prometheus_scrapes_over_tls_with_basic_auth(daemon_factory, pki, prometheus):
    d = daemon_factory(SCENARIO)
    start_tls(d, pki)
    extra = (
        "    scheme: https\n"
        f"    tls_config:\n      ca_file: {pki / 'ca.crt'}\n"
        f"    basic_auth:\n      username: {USER}\n      password: {PASSWORD}\n"
    )
    base = prometheus(f"127.0.0.1:{d.port}", extra)
    wait_query(base, 'up{job="stallwatch"} == 1')
    util = wait_query(base, 'stallwatch_gpu_utilization_ratio{gpu="0"}')
    assert float(util[0]["value"][1]) == 0.42


def test_rotated_certificates_and_changed_passwords_apply_without_restart(daemon_factory, pki):
    d = daemon_factory(SCENARIO)
    old_ca = start_tls(d, pki)
    # Rotate: a certificate from a new CA replaces the server's files.
    rotated = pki / "rotated"
    rotated.mkdir()
    make_ca(rotated, "ca2")
    make_cert(rotated, "ca2", "server", SERVER_EXT)
    for name in ("server.key", "server.crt"):
        os.replace(rotated / name, pki / name)
    new_ca = ssl.create_default_context(cafile=str(rotated / "ca2.crt"))
    wait_until(lambda: https_get(d, "/metrics", new_ca, auth_header())[0] == 200,
               "new connections get the rotated certificate")
    with pytest.raises(urllib.error.URLError):
        https_get(d, "/metrics", old_ca, auth_header())
    # A new password hash: the old password stops working, the new one works.
    path = web_config(d, pki, password_hash=NEW_HASH)
    wait_until(lambda: https_get(d, "/metrics", new_ca, auth_header(password=NEW_PASSWORD))[0]
               == 200, "the new password is accepted")
    assert https_get(d, "/metrics", new_ca, auth_header())[0] == 401
    # A broken file is logged (when a connection comes) and the config before it stays.
    path.write_text("tls_server_config:\n  cert_fil: x\n")
    wait_until(
        lambda: https_get(d, "/metrics", new_ca, auth_header(password=NEW_PASSWORD))[0] == 200
        and "cert_fil" in d.logs(),
        "the error is logged while the previous config keeps serving",
    )
    assert "keeping the web config loaded before" in d.logs()
