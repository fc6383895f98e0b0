"""GPU faults as users meet them: Xid errors counted from NVML events and the
kernel log (once each), the memory, NVLink and recovery series, and a daemon
that goes on without the kernel log or with a GPU lost."""

import json
import os
import subprocess
import tempfile
import time
from pathlib import Path

import pytest
from bs4 import BeautifulSoup

import browser
from daemon import BINARY, Daemon, gpu
from test_diagnosis import FAST, job  # noqa: F401 (fixture)
from test_privileges import install_dir, setpriv  # noqa: F401 (fixture)

# The stand-in library's GPU n sits at PCI bus 0x17 + n (daemon.gpu).
def line(gpu_index, xid, rest=""):
    return f"NVRM: Xid (PCI:0000:{0x17 + gpu_index:02x}:00): {xid}{rest}"


def xids(m, **labels):
    return {s.labels["xid"]: s.value for s in m.find("stallwatch_gpu_xid_errors_total", **labels)}


def test_an_xid_from_both_sources_counts_once_and_a_repeat_counts_again(daemon_factory):
    scenario = {"gpus": [gpu(0), gpu(1)]}
    d = daemon_factory(scenario).start()
    scenario["kernel_log"] = str(d.kmsg_path)
    scenario["gpus"][0]["xids"] = [{"xid": 48, "pid": 4242, "name": "train.py"}]
    d.set_scenario(scenario)
    m = d.wait_for(lambda m: xids(m, gpu=0).get("48") == 1, what="Xid 48 on GPU 0")
    assert m.value("stallwatch_kernel_log_readable") == 1
    # Both the event and the kernel line have arrived by now; still one.
    deadline = time.monotonic() + 3
    while "48, pid=4242" not in d.kmsg_path.read_text() and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(1.0)
    assert xids(d.metrics(), gpu=0) == {"48": 1}
    assert xids(d.metrics(), gpu=1) == {}
    scenario["gpus"][0]["xids"].append({"xid": 48, "pid": 4242, "name": "train.py"})
    d.set_scenario(scenario)
    d.wait_for(lambda m: xids(m, gpu=0).get("48") == 2, what="the repeat counted")
    time.sleep(1.0)
    assert xids(d.metrics(), gpu=0) == {"48": 2}
    assert d.logs().count("GPU Xid error") == 2, d.logs()


def test_kernel_log_lines_with_and_without_pids_garbage_and_overlong(daemon_factory):
    d = daemon_factory({"gpus": [gpu(0), gpu(1)]}).start()
    d.wait_for(lambda m: m.has("stallwatch_kernel_log_readable"), what="kernel log state")
    overlong = line(0, 79, ", pid=1, name=x, " + "A" * 10000)
    d.kernel_log(
        b"\xff\xfe\x00 not a line at all",
        "NVRM: Xid (PCI:0000:17:00): notanumber, pid=1",
        "NVRM: Xid (PCI:zzzz:17:00): 31",
        overlong,
        "6,1234,5678,-;" + line(1, 13, ", pid=777, name=python3, Graphics Exception"),
        "[  966.50] " + line(0, 31, ", pid='<unknown>', name=<unknown>, MMU Fault"),
        line(1, 9999, ", pid=778, name=python3, something new"),
        line(7, 79, ", pid=1, name=x, a GPU NVML does not list"),
    )
    m = d.wait_for(lambda m: xids(m, gpu=1).get("other") == 1, what="the lines counted")
    time.sleep(0.5)
    m = d.metrics()
    assert xids(m, gpu=0) == {"31": 1}, "the overlong 79 is skipped whole"
    assert xids(m, gpu=1) == {"13": 1, "other": 1}
    assert m.value("stallwatch_kernel_log_readable") == 1
    assert "a GPU that NVML does not list" in d.logs()


def test_health_counters_are_exported(daemon_factory):
    health = {
        "ecc_corrected": 12, "ecc_uncorrected": 1, "remapped_rows_correctable": 2,
        "remapped_rows_uncorrectable": 1, "row_remap_pending": True, "row_remap_failure": False,
        "nvlink_crc_flit_errors": 3, "nvlink_replay_errors": 40, "recovery_action": 1,
    }
    d = daemon_factory({"gpus": [gpu(0, health=health), gpu(1)]}).start()
    m = d.wait_for(lambda m: m.has("stallwatch_gpu_ecc_errors_total"), what="ECC series")
    assert m.value("stallwatch_gpu_ecc_errors_total", gpu=0, type="uncorrected") == 1
    assert m.value("stallwatch_gpu_ecc_errors_total", gpu=0, type="corrected") == 12
    assert m.value("stallwatch_gpu_remapped_rows", gpu=0, type="uncorrectable") == 1
    assert m.value("stallwatch_gpu_row_remap_pending", gpu=0) == 1
    assert m.value("stallwatch_gpu_row_remap_failure", gpu=0) == 0
    assert m.value("stallwatch_gpu_nvlink_errors_total", gpu=0, type="replay") == 40
    assert m.value("stallwatch_gpu_recovery_action", gpu=0, action="gpu_reset") == 1
    assert m.value("stallwatch_gpu_recovery_action", gpu=0, action="none") == 0
    assert not m.has("stallwatch_gpu_ecc_errors_total", gpu=1), "GPU 1 reports no health fields"


def event_thread_cpu_seconds(pid):
    total = 0.0
    for task in Path(f"/proc/{pid}/task").iterdir():
        if (task / "comm").read_text().strip() == "nvml-events":
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def test_xids_while_a_gpu_is_lost(daemon_factory):
    scenario = {"gpus": [gpu(0), gpu(1)]}
    d = daemon_factory(scenario).start()
    d.wait_for(lambda m: m.value("stallwatch_gpu_up", gpu=1) == 1, what="GPU 1 up")
    # The driver writes 79 and the GPU falls off the bus; NVML events miss 79.
    scenario["kernel_log"] = str(d.kmsg_path)
    scenario["gpus"][1].update(lost=True, xids=[{"xid": 79, "nvml_event": False, "message": "GPU has fallen off the bus."}])
    d.set_scenario(scenario)
    m = d.wait_for(lambda m: xids(m, gpu=1).get("79") == 1, what="Xid 79 on the lost GPU")
    assert m.value("stallwatch_gpu_up", gpu=1) == 0
    # The events thread waits; it does not spin on the lost GPU's errors.
    before = event_thread_cpu_seconds(d.process.pid)
    time.sleep(3)
    used = event_thread_cpu_seconds(d.process.pid) - before
    assert used < 0.5, f"the events thread used {used:.2f} s of CPU in 3 s"
    # And it comes back: an Xid on GPU 0 still arrives.
    scenario["gpus"][0]["xids"] = [{"xid": 94, "kernel_log": False}]
    d.set_scenario(scenario)
    d.wait_for(lambda m: xids(m, gpu=0).get("94") == 1, what="an NVML event on GPU 0")
    assert xids(d.metrics(), gpu=1) == {"79": 1}



def test_a_gpu_that_cannot_register_leaves_the_others_their_events(daemon_factory):
    # Every GPU is registered in one event set, and NVML frees a set whose
    # registration fails: the GPUs registered before and after the failing
    # one must still deliver their Xids, and it joins once it can.
    scenario = {
        "gpus": [gpu(0), gpu(1), gpu(2)],
        "faults": [{"call": "nvmlDeviceRegisterEvents", "gpu": 1, "error": "unknown"}],
    }
    d = daemon_factory(scenario).start()
    time.sleep(1.5)  # the events thread has registered what it can
    scenario["gpus"][0]["xids"] = [{"xid": 94, "kernel_log": False}]
    scenario["gpus"][2]["xids"] = [{"xid": 95, "kernel_log": False}]
    d.set_scenario(scenario)
    d.wait_for(
        lambda m: xids(m, gpu=0).get("94") == 1 and xids(m, gpu=2).get("95") == 1,
        what="NVML events on GPUs 0 and 2",
    )
    # Registration works again: GPU 1 joins at the next look (every 10 s);
    # its Xid falls due after that.
    del scenario["faults"]
    scenario["gpus"][1]["xids"] = [{"xid": 48, "at_ms": 11000, "kernel_log": False}]
    d.set_scenario(scenario)
    d.wait_for(lambda m: xids(m, gpu=1).get("48") == 1, timeout=20, what="an NVML event on GPU 1 once it joined")
    m = d.metrics()
    assert (xids(m, gpu=0), xids(m, gpu=2)) == ({"94": 1}, {"95": 1})
    assert "panicked" not in d.logs()

@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run the daemon as nobody")
def test_without_kernel_log_access_nvml_events_still_count(install_dir):
    if Path("/proc/sys/kernel/dmesg_restrict").read_text().strip() != "1":
        pytest.skip("kernel.dmesg_restrict=0: /dev/kmsg is readable without CAP_SYSLOG")
    work = Path(tempfile.mkdtemp(dir=install_dir))
    work.chmod(0o755)
    scenario = {"gpus": [gpu(0)]}
    d = Daemon(
        work,
        scenario,
        config='[faults]\nkernel_log = "/dev/kmsg"\nevent_wait = "100ms"\n',
        library=install_dir / "libnvidia_ml.so",
        binary=install_dir / "stallwatch",
        prefix=setpriv([]),
    )
    d.config_path.chmod(0o644)
    d.scenario_path.chmod(0o644)
    d.start()
    try:
        m = d.wait_for(lambda m: m.has("stallwatch_kernel_log_readable"), what="kernel log state")
        assert m.value("stallwatch_kernel_log_readable") == 0
        scenario["gpus"][0]["xids"] = [{"xid": 74}]
        d.set_scenario(scenario)
        d.scenario_path.chmod(0o644)
        d.wait_for(lambda m: xids(m, gpu=0).get("74") == 1, what="Xid 74 from NVML events")
        assert d.logs().count("cannot read the kernel log") == 1, d.logs()
        assert "CAP_SYSLOG" in d.logs()
    finally:
        assert d.stop() == 0, d.logs()


def status(d):
    code, _, body = d.get("/api/v1/status")
    assert code == 200, body
    return json.loads(body)


def events(d):
    code, _, body = d.get("/api/v1/events")
    assert code == 200, body
    return json.loads(body)["events"]


def wait_until(what, predicate, timeout=20):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = predicate()
        if last:
            return last
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def holding(pid, util=95):
    return [{"pid": pid, "used_memory_bytes": 8 * 2**30, "sm_util": util}]


def test_an_xid_during_a_running_job_is_a_gpu_fault_with_its_action(daemon_factory, job, tmp_path):
    scenario = {"gpus": [gpu(0, utilization_gpu=95, processes=holding(job.pid)), gpu(1)]}
    d = daemon_factory(scenario, config=FAST).start()
    wait_until("the job on GPU 0", lambda: status(d)["gpus"][0]["jobs"])
    assert not any(a["kind"] == "gpu_fault" for a in status(d)["gpus"][0]["active"])
    # The driver reports a double-bit ECC error, blaming the job's process.
    scenario["kernel_log"] = str(d.kmsg_path)
    scenario["gpus"][0]["xids"] = [{"xid": 48, "pid": job.pid, "name": "python3", "message": "DBE (double bit error)"}]
    d.set_scenario(scenario)
    start = wait_until(
        "a gpu_fault start event",
        lambda: next((e for e in events(d) if e["kind"] == "gpu_fault" and e["phase"] == "start"), None),
    )
    assert start["gpu"] == 0 and start["job"]["pid"] == job.pid
    fault = start["evidence"]["fault"]
    assert fault["action"] == "reset_gpu"
    x = fault["xid"]
    assert (x["xid"], x["pid"], x["comm"]) == (48, job.pid, "python3"), fault
    assert "double-bit" in x["meaning"] and x["detail"] == "DBE (double bit error)"
    assert f"Xid 48 (double-bit (uncorrectable) ECC memory error, pid {job.pid} (python3))" in start["hint"]
    assert "nvidia-smi -r" in start["hint"]
    s = status(d)["gpus"][0]
    assert s["verdict"] == "stalled"
    assert any(a["kind"] == "gpu_fault" for a in s["active"])
    m = d.metrics()
    assert m.value("stallwatch_gpu_stall_active", gpu=0, kind="gpu_fault") == 1
    assert m.value("stallwatch_gpu_xid_errors_total", gpu=0, xid="48") == 1
    assert "gpu_fault" in d.logs()
    # The status page shows the finding with the Xid, the process and the action.
    dom, _, console = browser.load(d.url + "/", budget_ms=4000)
    assert console == [], console
    page = BeautifulSoup(dom, "html.parser")
    finding = page.select_one('article#gpu-0 li.kind.stall[data-kind="gpu_fault"]')
    assert finding, page.select_one("article#gpu-0")
    shown = {div.dt.get_text(strip=True): div.dd.get_text(" ", strip=True) for div in finding.select(".evidence div")}
    assert shown["fault"].startswith(f"Xid 48: double-bit (uncorrectable) ECC memory error, pid {job.pid} (python3)"), shown
    assert shown["fault"].endswith("action: reset gpu"), shown


def test_check_reports_a_gpu_fault(daemon_factory, job):
    scenario = {"gpus": [gpu(0, utilization_gpu=95, processes=holding(job.pid))]}
    d = daemon_factory(scenario, config='[diagnosis]\nwarmup = "1s"\n')
    scenario["kernel_log"] = str(d.kmsg_path)
    scenario["gpus"][0]["xids"] = [{"xid": 79, "at_ms": 1500, "pid": job.pid, "name": "python3", "message": "GPU has fallen off the bus."}]
    d.set_scenario(scenario)
    env = dict(os.environ, STALLWATCH_FAKE_NVML=str(d.scenario_path))
    r = subprocess.run(
        [str(BINARY), "check", "--config", str(d.config_path), "--duration", "6s"],
        capture_output=True, text=True, timeout=60, env=env,
    )
    assert r.returncode == 1, r.stdout + r.stderr
    assert "gpu_fault" in r.stdout, r.stdout
    assert f"Xid 79 (GPU has fallen off the bus, pid {job.pid} (python3))" in r.stdout, r.stdout
    assert "Drain the node" in r.stdout, r.stdout


def test_events_come_back_after_the_driver_goes_away(daemon_factory):
    scenario = {"gpus": [gpu(0)]}
    d = daemon_factory(scenario).start()
    time.sleep(1.5)  # the events thread has registered GPU 0
    # The driver goes away: event waits and device counts fail.
    scenario["faults"] = [
        {"call": "nvmlEventSetWait_v2", "error": "driver_not_loaded"},
        {"call": "nvmlDeviceGetCount", "error": "driver_not_loaded"},
    ]
    d.set_scenario(scenario)
    time.sleep(1.0)
    before = event_thread_cpu_seconds(d.process.pid)
    time.sleep(3)
    used = event_thread_cpu_seconds(d.process.pid) - before
    assert used < 0.5, f"the events thread used {used:.2f} s of CPU in 3 s without a driver"
    # It comes back: the thread initialises NVML again and registers the GPU.
    del scenario["faults"]
    d.set_scenario(scenario)
    # An Xid due once the thread has certainly registered again (its pause
    # between attempts grows to at most 10 s); one due earlier would be history
    # to the new registration, as with a real driver.
    scenario["gpus"][0]["xids"] = [{"xid": 95, "at_ms": 11000, "kernel_log": False}]
    d.set_scenario(scenario)
    d.wait_for(lambda m: xids(m, gpu=0).get("95") == 1, timeout=20, what="an NVML event after the driver came back")
    assert "panicked" not in d.logs()


def test_kernel_log_from_a_fifo(daemon_factory, tmp_path):
    fifo = tmp_path / "kmsg.fifo"
    os.mkfifo(fifo)
    d = daemon_factory({"gpus": [gpu(0)]}, config=f'[faults]\nkernel_log = "{fifo}"\n').start()
    d.wait_for(lambda m: m.has("stallwatch_kernel_log_readable"), what="kernel log state")
    for n in (1, 2):  # a writer comes, goes, and comes again
        with open(fifo, "w") as f:
            f.write(line(0, 43, f", pid={100 + n}, name=python3, Ch 00000010") + "\n")
        d.wait_for(lambda m: xids(m, gpu=0).get("43") == n, what=f"Xid 43 number {n}")
    assert d.metrics().value("stallwatch_kernel_log_readable") == 1
