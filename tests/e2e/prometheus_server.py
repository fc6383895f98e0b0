"""A real Prometheus server for the end-to-end tests."""

import shutil
import subprocess

from daemon import free_port


class PrometheusServer:
    """Runs `prometheus` on a free loopback port with `config_text` as its config file,
    its data and log under `tmp`."""

    def __init__(self, tmp, config_text):
        binary = shutil.which("prometheus")
        assert binary, "prometheus not installed: run scripts/install-test-deps"
        config = tmp / "prometheus.yml"
        config.write_text(config_text)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = open(tmp / "prometheus.log", "wb")
        self.process = subprocess.Popen(
            [
                binary,
                f"--config.file={config}",
                f"--storage.tsdb.path={tmp / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
            ],
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )

    def stop(self):
        self.process.terminate()
        self.process.wait(timeout=20)
        self.log.close()
