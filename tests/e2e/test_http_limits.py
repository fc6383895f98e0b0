"""The HTTP server's limits as a client sees them: routes and methods, header and URI
limits, the header read timeout against slowloris clients, the connection cap, and fast
scrapes that keep working while slow clients hold connections."""

import socket
import time

from daemon import Metrics, gpu

SCENARIO = {"gpus": [gpu(0)]}
SERVER = 'header_read_timeout = "1s"\n'


def raw(port, data, timeout=5.0):
    """Sends raw bytes; returns (status line, whole answer) once the server closes."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(data)
        answer = b""
        try:
            while chunk := s.recv(65536):
                answer += chunk
        except (socket.timeout, ConnectionResetError):
            pass
    return answer.split(b"\r\n", 1)[0].decode(), answer


def closed_by_server(sock, within):
    """True when the server closes `sock` within `within` seconds."""
    sock.settimeout(within)
    try:
        while True:
            if sock.recv(4096) == b"":
                return True
    except ConnectionResetError:
        return True
    except socket.timeout:
        return False


def slowloris(port, sent=b"GET /metrics HTTP/1.1\r\nHost: x\r\n"):
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(sent)
    return s


def test_only_documented_routes_and_methods(daemon_factory):
    d = daemon_factory(SCENARIO, server=SERVER).start()
    status, headers, _ = d.get("/metrics")
    assert status == 200
    line, answer = raw(d.port, b"HEAD /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    assert line == "HTTP/1.1 200 OK", answer
    for method in (b"POST", b"DELETE", b"FOO"):
        line, answer = raw(
            d.port, method + b" /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
        )
        assert line == "HTTP/1.1 405 Method Not Allowed", answer
        assert b"\r\nallow: get,head\r\n" in answer.lower(), answer
    line, _ = raw(d.port, b"GET /admin HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    assert line == "HTTP/1.1 404 Not Found"


def test_oversized_requests_are_refused(daemon_factory):
    d = daemon_factory(SCENARIO, server=SERVER + "max_headers = 20\n").start()
    big = b"X-Big: " + b"a" * 9000 + b"\r\n"
    line, _ = raw(d.port, b"GET /metrics HTTP/1.1\r\nHost: x\r\n" + big + b"\r\n")
    assert line == "HTTP/1.1 431 Request Header Fields Too Large"
    many = b"".join(b"X-%d: 1\r\n" % i for i in range(30))
    line, _ = raw(d.port, b"GET /metrics HTTP/1.1\r\nHost: x\r\n" + many + b"\r\n")
    assert line == "HTTP/1.1 431 Request Header Fields Too Large"
    long_uri = b"/api/v1/events?since=" + b"1" * 3000
    line, _ = raw(d.port, b"GET " + long_uri + b" HTTP/1.1\r\nHost: x\r\n\r\n")
    assert line == "HTTP/1.1 414 URI Too Long"
    line, answer = raw(
        d.port, b"GET /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello"
    )
    assert line == "HTTP/1.1 400 Bad Request", answer
    assert b"no body" in answer
    # The daemon still serves after all that.
    assert d.get("/healthz")[0] == 200


def test_slowloris_is_closed_after_the_header_timeout(daemon_factory):
    d = daemon_factory(SCENARIO, server=SERVER).start()
    s = slowloris(d.port)
    start = time.monotonic()
    closed = False
    # Trickle a header line every 200 ms: each arrives in time, the whole head never does.
    while time.monotonic() - start < 8:
        try:
            s.sendall(b"X-Trickle: 1\r\n")
        except (BrokenPipeError, ConnectionResetError):
            closed = True
            break
        if closed_by_server(s, 0.2):
            closed = True
            break
    s.close()
    assert closed, "a client trickling headers kept its connection for 8 s"
    # A connection that sends nothing at all is closed too.
    silent = socket.create_connection(("127.0.0.1", d.port))
    assert closed_by_server(silent, 8)
    silent.close()
    assert d.get("/healthz")[0] == 200


def test_the_connection_cap_holds(daemon_factory):
    d = daemon_factory(SCENARIO, server='header_read_timeout = "30s"\nmax_connections = 3\n')
    d.start()
    holders = [slowloris(d.port) for _ in range(3)]
    time.sleep(0.2)
    # A fourth client is served: the connection that waited longest without a request in
    # progress is closed to make room, so no more than 3 are ever open.
    status, _, body = d.get("/metrics")
    assert status == 200
    Metrics(body.decode())
    assert closed_by_server(holders[0], 2), "the oldest waiting connection was not closed"
    assert not closed_by_server(holders[1], 0.3)
    assert not closed_by_server(holders[2], 0.3)
    for h in holders:
        h.close()
    assert d.get("/healthz")[0] == 200


def test_fast_scrapes_succeed_while_slow_clients_hold_connections(daemon_factory):
    d = daemon_factory(SCENARIO, server=SERVER + "max_connections = 16\n").start()
    hostile = [slowloris(d.port) for _ in range(24)]
    idle = [socket.create_connection(("127.0.0.1", d.port)) for _ in range(8)]
    try:
        for _ in range(20):
            status, headers, body = d.get("/metrics", timeout=5)
            assert status == 200
            assert Metrics(body.decode()).value("stallwatch_gpu_up", gpu=0) == 1
            for s in hostile[:4]:
                try:
                    s.sendall(b"X-Trickle: 1\r\n")
                except OSError:
                    pass
    finally:
        for s in hostile + idle:
            s.close()


def test_sigterm_with_slow_clients_connected_exits_0(daemon_factory):
    d = daemon_factory(SCENARIO, server='header_read_timeout = "30s"\n').start()
    hostile = [slowloris(d.port) for _ in range(5)]
    # Nobody is mid-request: the daemon exits without waiting out the 30 s header timeout
    # (stop() allows 10 s).
    assert d.stop() == 0, d.logs()
    for s in hostile:
        s.close()
