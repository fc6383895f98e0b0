"""MIG instances monitored as GPUs: their own series (gpu="<parent>/<gi>/<ci>", the MIG
uuid, the parent in stallwatch_gpu_mig_info), memory, processes and jobs, GPM as their
activity, the diagnosis per instance, and reconfiguration while running."""

import json

from daemon import gpu
from test_diagnosis import FAST, job  # noqa: F401 (job: the spinner fixture)

PARENT_UUID = "GPU-00000000-0000-0000-0000-000000000000"
MIG_A = "MIG-00000000-0000-4000-8000-000000010000"
MIG_B = "MIG-11111111-2222-3333-4444-555555555555"


def scenario(pid, instances=None, sm_util=0.0):
    if instances is None:
        instances = [
            {"gpu_instance_id": 1, "memory_total_bytes": 20 * 2**30, "memory_used_bytes": 8 * 2**30,
             "processes": [{"pid": pid, "used_memory_bytes": 8 * 2**30}],
             "gpm": {"sm_util": sm_util, "any_tensor_util": 0.0, "dram_bw_util": 0.0}},
            {"gpu_instance_id": 2, "uuid": MIG_B, "profile": "3g.40gb",
             "gpm": {"sm_util": 0.0}},
        ]
    return {"gpus": [gpu(0, utilization_gpu=90, gpm={"sm_util": 40.0}, mig=instances),
                     gpu(1, utilization_gpu=30)]}


def status(d):
    code, _, body = d.get("/api/v1/status")
    assert code == 200, body
    return json.loads(body)


def test_mig_instances_are_gpus_with_their_own_series(daemon_factory, job):
    d = daemon_factory(scenario(job.pid, sm_util=37.5)).start()
    m = d.wait_for(lambda m: m.has("stallwatch_gpu_sm_active_ratio", gpu="0/1/0"), what="instance GPM")
    a = dict(gpu="0/1/0", uuid=MIG_A)
    info = m.find("stallwatch_gpu_mig_info", **a)[0].labels
    assert info["parent_gpu"] == "0" and info["parent_uuid"] == PARENT_UUID
    assert info["gpu_instance"] == "1" and info["compute_instance"] == "0"
    assert m.find("stallwatch_gpu_info", gpu="0/2/0")[0].labels["name"] == "NVIDIA H100 80GB HBM3 MIG 3g.40gb"
    assert m.value("stallwatch_gpu_mig_info", gpu="0/2/0", uuid=MIG_B) == 1
    assert m.value("stallwatch_gpu_up", **a) == 1
    assert m.value("stallwatch_gpu_memory_used_bytes", **a) == 8 * 2**30
    assert m.value("stallwatch_gpu_memory_total_bytes", **a) == 20 * 2**30
    assert m.value("stallwatch_gpu_sm_active_ratio", **a) == 0.375
    # The job on the instance: its process and memory there, not on the parent.
    assert m.value("stallwatch_process_gpu_memory_bytes", pid=job.pid, **a) == 8 * 2**30
    assert not m.has("stallwatch_process_gpu_memory_bytes", gpu="0")
    # No utilization.gpu with MIG on, on the parent or an instance; the other GPU has it.
    assert not m.has("stallwatch_gpu_utilization_ratio", gpu="0")
    assert not m.has("stallwatch_gpu_utilization_ratio", **a)
    assert m.value("stallwatch_gpu_utilization_ratio", gpu="1") == 0.30
    # Each instance has its diagnosis series.
    assert m.has("stallwatch_gpu_verdict", verdict="no_job", gpu="0/2/0")
    assert m.has("stallwatch_gpu_stall_active", kind="spinning", **a)
    assert m.value("stallwatch_source_errors_total", source="nvml") == 0


def test_a_starved_instance_is_diagnosed_from_gpm(daemon_factory, job):
    # The job spins a thread on its input while its instance's SMs sit idle.
    d = daemon_factory(scenario(job.pid, sm_util=0.0), config=FAST).start()
    m = d.wait_for(
        lambda m: m.value("stallwatch_gpu_stall_active", kind="input_starved", gpu="0/1/0") == 1,
        timeout=40, what="input_starved on the instance",
    )
    assert m.value("stallwatch_gpu_verdict", verdict="stalled", gpu="0/1/0") == 1
    assert m.value("stallwatch_gpu_verdict", verdict="no_job", gpu="0/2/0") == 1
    s = status(d)
    inst = [g for g in s["gpus"] if g["uuid"] == MIG_A][0]
    starved = [k for k in inst["active"] if k["kind"] == "input_starved"][0]
    assert starved["evidence"]["activity_signal"] == "gpm_sm_active"


def test_reconfiguration_is_gpus_going_and_coming(daemon_factory, job):
    d = daemon_factory(scenario(job.pid)).start()
    d.wait_for(lambda m: m.has("stallwatch_gpu_info", gpu="0/2/0"), what="two instances")
    # Instance 2 destroyed, instance 3 created.
    d.set_scenario(scenario(job.pid, instances=[
        {"gpu_instance_id": 1, "processes": [{"pid": job.pid, "used_memory_bytes": 2**30}]},
        {"gpu_instance_id": 3, "compute_instance_id": 1},
    ]))
    m = d.wait_for(lambda m: m.has("stallwatch_gpu_info", gpu="0/3/1"), what="the new instance")
    assert not m.has("stallwatch_gpu_info", gpu="0/2/0")
    assert not m.has("stallwatch_gpu_memory_used_bytes", gpu="0/2/0")
    assert m.value("stallwatch_process_gpu_memory_bytes", pid=job.pid, gpu="0/1/0") == 2**30
    # MIG off: the GPU is whole again, its utilization back.
    d.set_scenario({"gpus": [gpu(0, utilization_gpu=90), gpu(1, utilization_gpu=30)]})
    m = d.wait_for(lambda m: m.has("stallwatch_gpu_utilization_ratio", gpu="0"), what="MIG off")
    assert not m.has("stallwatch_gpu_mig_info")
    assert m.value("stallwatch_source_errors_total", source="nvml") == 0
