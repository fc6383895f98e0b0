"""SIGTERM while many scrapes are in flight, some of them reading slowly:
every response is whole or the connection is refused or closed before a
response starts; never a truncated 200. The daemon exits 0 and says so."""

import gzip
import socket
import threading
import time

from daemon import Metrics, gpu

GPUS = 8


def busy_scenario():
    # Many series, so a /metrics body takes a slow reader a while.
    return {
        "gpus": [
            gpu(i, processes=[{"pid": 300000 + 100 * i + p, "used_memory_bytes": 2**30, "sm_util": 10} for p in range(16)])
            for i in range(GPUS)
        ]
    }


def exchange(port, path, gzip_ok, chunk, pause):
    """One request on a raw socket; reads the answer `chunk` bytes at a time
    with `pause` between reads. Returns ("refused" | "closed" | "response", raw bytes)."""
    try:
        s = socket.create_connection(("127.0.0.1", port), timeout=10)
    except (ConnectionRefusedError, ConnectionResetError):
        # Reset: the connection was still in the listener's backlog, never
        # accepted, when the daemon closed it on shutdown.
        return "refused", b""
    with s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # keep the server's writes waiting on us
        request = f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
        if gzip_ok:
            request += "Accept-Encoding: gzip\r\n"
        try:
            s.sendall((request + "\r\n").encode())
            raw = b""
            while True:
                data = s.recv(chunk)
                if not data:
                    break
                raw += data
                time.sleep(pause)
        except (ConnectionResetError, BrokenPipeError):
            return ("closed" if not raw else "reset-after-bytes"), raw
    return ("response" if raw else "closed"), raw


def dechunk(body):
    out = b""
    while True:
        size_line, _, rest = body.partition(b"\r\n")
        size = int(size_line.split(b";")[0], 16)
        if size == 0:
            return out
        assert len(rest) >= size + 2, "chunked body cut short"
        out += rest[:size]
        body = rest[size + 2 :]


def check_whole(raw):
    """Asserts `raw` is one complete HTTP response; returns (status, body)."""
    head, sep, body = raw.partition(b"\r\n\r\n")
    assert sep, f"headers cut short: {raw[:200]!r}"
    lines = head.decode().split("\r\n")
    status = int(lines[0].split()[1])
    headers = {k.lower(): v.strip() for k, v in (line.split(":", 1) for line in lines[1:])}
    if "content-length" in headers:
        assert len(body) == int(headers["content-length"]), f"body {len(body)} of {headers['content-length']} bytes"
    else:
        assert headers.get("transfer-encoding") == "chunked", headers
        assert body.endswith(b"0\r\n\r\n"), "chunked body without its last chunk"
        body = dechunk(body)
    if headers.get("content-encoding") == "gzip":
        body = gzip.decompress(body)  # raises on a cut stream
    return status, body


def test_sigterm_during_scrapes_completes_or_refuses_cleanly(daemon_factory):
    d = daemon_factory(busy_scenario()).start()
    d.wait_for(lambda m: len(m.find("stallwatch_process_gpu_memory_bytes")) == GPUS * 16, what="all series")
    results = []
    lock = threading.Lock()

    def scraper(n):
        path = ["/metrics", "/api/v1/status", "/api/v1/events", "/healthz"][n % 4]
        slow = n % 3 == 0
        for _ in range(200):
            outcome = exchange(d.port, path, gzip_ok=n % 2 == 0, chunk=1024 if slow else 65536, pause=0.01 if slow else 0)
            with lock:
                results.append((path, *outcome))
            if outcome[0] in ("refused", "closed"):
                return

    threads = [threading.Thread(target=scraper, args=(n,)) for n in range(24)]
    for t in threads:
        t.start()
    time.sleep(1.0)  # scrapes in flight, slow ones mid-body
    code = d.stop()
    for t in threads:
        t.join(timeout=30)
    assert not any(t.is_alive() for t in threads), "a scrape hung after shutdown"
    assert code == 0, d.logs()
    assert "stallwatch stopped" in d.logs()

    outcomes = {}
    for path, outcome, raw in results:
        outcomes[outcome] = outcomes.get(outcome, 0) + 1
        assert outcome != "reset-after-bytes", f"{path}: connection reset mid-response after {len(raw)} bytes"
        if outcome == "response":
            status, body = check_whole(raw)
            if status == 200 and path == "/metrics":
                Metrics(body.decode())  # whole and strictly parseable: ends with # EOF
            else:
                assert status in (200, 503), (path, status)
    assert outcomes.get("response", 0) >= 24, outcomes
    assert outcomes.keys() <= {"response", "refused", "closed"}, outcomes


def test_stalled_client_does_not_keep_the_daemon_from_stopping(daemon_factory):
    d = daemon_factory({"gpus": [gpu(0)]}).start()
    # Half a request, never finished; and a whole one whose answer is never read.
    half = socket.create_connection(("127.0.0.1", d.port))
    half.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
    mute = socket.create_connection(("127.0.0.1", d.port))
    mute.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
    time.sleep(0.5)
    with half, mute:
        code = d.stop()  # waits at most 10 s
        assert code == 0, d.logs()
        # The half-sent request got no answer: its connection was closed, not left open.
        half.settimeout(1.0)
        try:
            assert half.recv(4096) == b""
        except ConnectionResetError:
            pass
    assert "stallwatch stopped" in d.logs()
