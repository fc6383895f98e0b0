"""Headless Debian Chromium: load a page, let its script run, and return the DOM
(or a screenshot) and the URL of every request the page made."""

import json
import shutil
import subprocess
import tempfile
from pathlib import Path
from urllib.parse import urlsplit

# No sandbox (CI runs as root), no GPU, and none of the browser's own traffic
# (updates, sync, first-run pages), so the net log holds only the page's requests.
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def chromium_binary():
    path = shutil.which("chromium")
    assert path, "chromium is missing: run scripts/install-test-deps"
    return path


def load(url, *, budget_ms=5000, screenshot=None, window="1280,1000", timeout=60):
    """Loads `url` with `budget_ms` of virtual time for its script (timers run
    ahead, network answers are awaited), then returns (dom, requests, console):
    the DOM as serialized HTML, the URLs of every request the page made (the
    page itself first), and the page's console messages (script errors and
    refused loads among them). With `screenshot` (a path), saves a PNG of the
    window instead of the DOM."""
    with tempfile.TemporaryDirectory(prefix="chromium-") as tmp:
        net_log = Path(tmp) / "net-log.json"
        args = [
            chromium_binary(),
            *FLAGS,
            f"--user-data-dir={tmp}/profile",
            f"--log-net-log={net_log}",
            f"--virtual-time-budget={budget_ms}",
            f"--window-size={window}",
            "--enable-logging=stderr",
            "--v=0",
        ]
        args += [f"--screenshot={screenshot}"] if screenshot else ["--dump-dom"]
        r = subprocess.run([*args, url], capture_output=True, text=True, timeout=timeout)
        assert r.returncode == 0, f"chromium exited with {r.returncode}:\n{r.stderr[-3000:]}"
        console = [line.split(":CONSOLE", 1)[1] for line in r.stderr.splitlines() if ":CONSOLE" in line]
        return r.stdout, page_requests(net_log, url), console


def page_requests(net_log, page_url):
    """URLs of the requests made for the page at `page_url`, from a Chromium net
    log: the navigation and every request the page started (its network
    isolation key names the page's site). The browser's own background requests
    (update checks and the like) carry another key and are left out."""
    page = urlsplit(page_url)
    site = f"{page.scheme}://{page.hostname}"
    log = json.loads(net_log.read_text())
    start_job = log["constants"]["logEventTypes"]["URL_REQUEST_START_JOB"]
    urls = []
    for event in log["events"]:
        params = event.get("params") or {}
        if event["type"] != start_job or "url" not in params:
            continue
        top_frame_site = params.get("network_isolation_key", "").split(" ")[0]
        if top_frame_site == site or params.get("initiator", "").startswith(site):
            urls.append(params["url"])
    return urls


def origin(url):
    u = urlsplit(url)
    return f"{u.scheme}://{u.netloc}"
