import pytest

from daemon import Daemon


@pytest.fixture
def daemon_factory(tmp_path):
    """Makes daemons that are stopped (SIGTERM, exit 0 asserted) after the test."""
    made = []

    def make(*args, **kwargs):
        sub = tmp_path / f"d{len(made)}"
        sub.mkdir()
        d = Daemon(sub, *args, **kwargs)
        made.append(d)
        return d

    yield make
    for d in made:
        if d.process is not None and d.process.poll() is None:
            code = d.stop()
            assert code == 0, f"daemon exited with {code} on SIGTERM:\n{d.logs()}"
