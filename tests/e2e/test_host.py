"""Host CPU figures from a `/proc/stat` that moves: the test copies the fixture
`/proc` tree and keeps advancing its CPU counters (written whole and renamed into
place, as the kernel's file is never torn) while the real daemon samples it."""

import shutil
import threading

from test_golden import FIXTURE_PROC

# Per step, ticks added to each CPU: user, nice, system, idle, iowait, irq, softirq, steal.
STEP = (2, 0, 1, 4, 0, 0, 0, 3)


def write_stat(proc, base, steps):
    lines = []
    for line in base:
        name, *fields = line.split()
        if name.startswith("cpu"):
            cpus = 2 if name == "cpu" else 1
            fields = [str(int(v) + steps * cpus * (STEP[i] if i < len(STEP) else 0)) for i, v in enumerate(fields)]
        lines.append(" ".join([name, *fields]))
    tmp = proc / "stat.new"
    tmp.write_text("\n".join(lines) + "\n")
    tmp.rename(proc / "stat")


def test_steal_is_the_share_of_cpu_time_the_hypervisor_took(daemon_factory, tmp_path):
    proc = tmp_path / "proc"
    shutil.copytree(FIXTURE_PROC, proc)
    base = (proc / "stat").read_text().splitlines()
    stop = threading.Event()

    def advance():
        steps = 0
        while not stop.wait(0.02):
            steps += 1
            write_stat(proc, base, steps)

    writer = threading.Thread(target=advance, daemon=True)
    writer.start()
    try:
        d = daemon_factory(config=f'[procfs]\nroot = "{proc}"\n').start()
        m = d.wait_for(lambda m: m.has("stallwatch_host_cpu_steal_ratio"), what="a steal figure")
        # A step: 10 ticks, 6 busy (user + system + steal), 3 of them stolen.
        assert abs(m.value("stallwatch_host_cpu_steal_ratio") - 0.3) < 1e-9
        assert abs(m.value("stallwatch_host_cpu_utilization_ratio") - 0.6) < 1e-9
    finally:
        stop.set()
        writer.join()
