"""The labelled scenario table, and a command line for humans:

    python3 tests/workloads/scenarios.py list
    python3 tests/workloads/scenarios.py run input_starved --time-scale 0.1 \\
        --scenario-file /tmp/nvml.json --duration-s 60

Times in the table are unscaled seconds; a run multiplies them by its time
scale (so do the daemon's windows, with `[diagnosis] time_scale`). Stalls start
at 150 s, after the daemon's 120 s warm-up. Durations leave room for the
default windows: 60-120 s for the input kinds, hang time >= 600 s for the
no-progress kinds, 600 s of idleness for a leftover process.
"""

import argparse
import importlib.util
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import cgroups  # noqa: E402
from gpu_meter import GpuSpec  # noqa: E402


@dataclass(frozen=True)
class Label:
    """An expected episode: `kind` fires on `gpu` from `onset_s` until `end_s` (None: the end)."""
    kind: str
    onset_s: float
    end_s: float = None
    gpu: int = 0

    def scaled(self, ts):
        return Label(self.kind, self.onset_s * ts, None if self.end_s is None else self.end_s * ts, self.gpu)


@dataclass
class JobSpec:
    name: str
    args: list                    # the script's flags; "{data_file}" and "{workdir}" are filled in
    start_s: float = 0.0
    script: str = "train.py"      # in tests/workloads: train.py (simulated) or tf_pipeline.py (tf.data)
    prepare: bool = False         # run the script with --prepare first, before the clock starts
    modules: tuple = ()           # Python modules the script needs (else the scenario is unavailable)
    cpus: str = None              # taskset CPU list for the whole job
    memory_limit_mib: int = None  # memory cgroup limit
    read_mib_per_s: float = None  # blkio limit on the work dir's disk
    write_mib_per_s: float = None
    data_file_mib: int = 0        # make {data_file} of this size first


@dataclass
class Scenario:
    name: str
    description: str
    jobs: list
    labels: list
    duration_s: float
    gpus: list = field(default_factory=lambda: [GpuSpec()])
    warmup_s: float = 120.0       # the daemon's grace period this scenario assumes


ONSET = 150
# A healthy pipeline: 4 map threads feed batches faster than the 30 ms step.
HEALTHY = ["--gpu-memory-gib", "60", "--step-kernel", "0.03", "--batch-size", "32",
           "--workers", "4", "--python-work-ms", "0.3", "--sleep-ms", "2",
           "--prefetch", "4", "--log-every-s", "5", "--startup-s", "5"]
STALL = ["--onset-s", str(ONSET)]


# The index stallwatch gives MIG instance 0/1/0 (collector::sample::mig_index).
MIG_0_1_0 = (1 << 24) + (0 << 16) + (1 << 8) + 0


def then(**knobs):
    return [x for k, v in knobs.items() for x in ("--then", f"{k}={v}")]


# Real tf.data pipelines (tf_pipeline.py, tensorflow-cpu): healthy until the onset (tf-native
# decode in a parallel map, prefetch; 100 ms steps, well fed on 2 cores), then the pipeline
# named by --after. Importing TensorFlow takes 5-15 s; the job takes the GPU only after that.
TF = ("tensorflow", "PIL")
TF_HEALTHY = ["--gpu-memory-gib", "60", "--before", "healthy", "--step-kernel", "0.1",
              "--log-every-s", "5"]


def tf_job(*args, **spec):
    return JobSpec("train", TF_HEALTHY + list(args), script="tf_pipeline.py", prepare=True,
                   modules=TF, **spec)


# Real PyTorch DataLoaders (torch_loader.py, torch on CPU): ready batches until the onset, then a
# DataLoader over a Dataset whose __getitem__ decodes JPEGs with PIL (decode_image) and smooths
# them in a per-pixel Python loop (smooth_pixels). Importing torch takes 2-5 s.
TORCH = ("torch", "PIL")


def torch_job(*args, **spec):
    return JobSpec("train", ["--gpu-memory-gib", "60", "--onset-s", str(ONSET), "--loop-pixels", "180",
                             "--step-kernel", "0.035", "--log-every-s", "5", *args],
                   script="torch_loader.py", prepare=True, modules=TORCH, **spec)


SCENARIOS = {s.name: s for s in [
    Scenario("healthy_steady", "a well-fed job: GPU ~95% busy, steady logging",
             [JobSpec("train", HEALTHY)], [], 600),
    Scenario("healthy_bursty", "healthy with evaluation (20 s every 90 s, short kernels) and "
             "checkpoints (10 s every 150 s, GPU idle, a real file written): the hard negative",
             [JobSpec("train", HEALTHY + ["--eval-every-s", "90", "--eval-s", "20",
                                          "--checkpoint-every-s", "150", "--checkpoint-s", "10"])],
             [], 600),
    Scenario("no_job", "GPU idle and nothing holds it", [], [], 300),
    Scenario("warm_up", "a job starved from its first step, watched for less than the warm-up",
             [JobSpec("train", HEALTHY + then(workers=1, sleep_ms=60, python_work_ms=8)
                      + ["--onset-s", "0"])], [], 100),
    Scenario("input_starved", "one map worker with 60 ms waits per sample: ~2 s per batch, GPU ~2%",
             [JobSpec("train", HEALTHY + STALL + then(workers=1, sleep_ms=60, python_work_ms=8))],
             [Label("input_starved", ONSET)], 360),
    Scenario("input_bound", "shards of 24 batches that take 2.5 s to open: GPU swings 0-75%, mean ~25%",
             [JobSpec("train", HEALTHY + STALL + then(shard_samples=768, shard_open_ms=2500))],
             [Label("input_bound", ONSET)], 450),
    Scenario("input_bound_steady", "a serial map (one worker) with ~2.5 ms per sample, far "
             "shorter than the 1 s utilization window: GPU a steady ~35%, never idle",
             [JobSpec("train", HEALTHY + STALL + then(workers=1))],
             [Label("input_bound", ONSET)], 450),
    Scenario("single_thread_bound", "map after batch: thread py_map runs 60 ms of Python per "
             "sample for the whole batch, pinned at one core; GPU ~2%",
             [JobSpec("train", HEALTHY + STALL + then(map_after_batch=1, python_work_ms=60, sleep_ms=0))],
             [Label("input_starved", ONSET), Label("single_thread_bound", ONSET)], 360),
    Scenario("gil_spread", "3 map threads run 100 ms of pure Python per sample: they take turns "
             "holding the GIL, each ~1/3 of a core and ~1 core together, none pinned; a batch "
             "per ~3.2 s, GPU ~1%",
             [JobSpec("train", HEALTHY + STALL + then(workers=3, python_work_ms=100, sleep_ms=0))],
             [Label("input_starved", ONSET), Label("single_thread_bound", ONSET)], 360),
    Scenario("cpu_saturated", "3 worker processes doing 40 ms of CPU per sample, the job "
             "confined to CPU 0 (taskset): they queue for the core",
             [JobSpec("train", HEALTHY + ["--worker-kind", "process", "--workers", "3"] + STALL
                      + then(python_work_ms=40, sleep_ms=0), cpus="0")],
             [Label("input_starved", ONSET), Label("cpu_saturated", ONSET)], 360),
    Scenario("io_bound", "4 map threads reading 512 KiB per sample with O_DIRECT from a disk "
             "throttled to 8 MiB/s (blkio cgroup): threads in D state, GPU ~2%",
             [JobSpec("train", HEALTHY + ["--data-file", "{data_file}"] + STALL
                      + then(read_bytes=524288, sleep_ms=0), read_mib_per_s=8, data_file_mib=64)],
             [Label("input_starved", ONSET), Label("io_bound", ONSET)], 360),
    Scenario("busy_hung", "healthy, then a kernel that never ends: 100% util at low power, no output",
             [JobSpec("train", HEALTHY + ["--spin-after-s", str(ONSET)])],
             [Label("spinning", ONSET), Label("busy_no_progress", ONSET)], 900),
    Scenario("spinning", "a Hopper GPU with GPM: healthy, then a collective that waits forever: "
             "100% util, a few SMs polling (3%), no tensor or memory traffic, low power, no output "
             "(its threads stand still: busy_no_progress confirmed by the stacks)",
             [JobSpec("train", HEALTHY + ["--spin-after-s", str(ONSET)])],
             [Label("spinning", ONSET), Label("busy_no_progress", ONSET)], 450, gpus=[GpuSpec(gpm=True)]),
    Scenario("launch_bound", "a Hopper GPU with GPM: kernels on a fifth of the SMs back to back: "
             "utilization ~95% but SM activity ~17%, while the job logs steadily (a finding)",
             [JobSpec("train", HEALTHY + ["--sm-share", "0.2"])],
             [Label("launch_bound", 120)], 600, gpus=[GpuSpec(gpm=True)]),
    Scenario("mig_input_starved", "a MIG host: the job runs on MIG instance 0/1/0 (no "
             "utilization.gpu, GPM SM activity only); one map worker with 60 ms waits per sample "
             "starves it: SM activity ~2%",
             [JobSpec("train", HEALTHY + STALL + then(workers=1, sleep_ms=60, python_work_ms=8))],
             [Label("input_starved", ONSET, gpu=MIG_0_1_0)], 360, gpus=[GpuSpec(mig=True)]),
    Scenario("fault_hung", "healthy, then the driver reports Xid 13 (an exception in the job's "
             "kernel) and the job spins on: 100% util at low power, no output",
             [JobSpec("train", HEALTHY + ["--spin-after-s", str(ONSET)])],
             [Label("gpu_fault", ONSET), Label("spinning", ONSET), Label("busy_no_progress", ONSET)], 900,
             gpus=[GpuSpec(xid=13, xid_at_s=ONSET)]),
    Scenario("idle_hung", "healthy, then the main loop deadlocks: GPU idle, CPU ~0, no output",
             [JobSpec("train", HEALTHY + ["--deadlock-after-s", str(ONSET)])],
             [Label("idle_no_progress", ONSET)], 900),
    Scenario("host_memory_pressure", "from 150 s an in-RAM cache grows 20 MiB/s to 440 MiB in a "
             "512 MiB memory cgroup, then spills to disk: reclaim stalls (PSI memory)",
             [JobSpec("train", HEALTHY + ["--cache-limit-mib", "440", "--spill-file", "{workdir}/spill.bin",
                                          "--spill-mib", "128"] + STALL
                      + then(cache_grow_mib_per_s=20, spill_mib_per_s=2000),
                      memory_limit_mib=512, write_mib_per_s=20)],
             [Label("host_memory_pressure", ONSET + 22)], 300),
    Scenario("shared_gpu", "a second, separate job (8 GiB, light kernels) joins GPU 0 at 150 s",
             [JobSpec("train", HEALTHY),
              JobSpec("notebook", ["--gpu-memory-gib", "8", "--step-kernel", "0.01", "--batch-size", "8",
                                   "--workers", "1", "--sleep-ms", "30", "--log-every-s", "30",
                                   "--startup-s", "2"], start_s=ONSET)],
             # It fires 150 s after the newcomer starts (its warm-up, then 30 s):
             # the run lasts until the label's deadline, not to that instant.
             [Label("shared_gpu", ONSET)], 360, gpus=[GpuSpec(), GpuSpec()]),
    Scenario("leftover_process", "a job's child holds 1 GiB without computing; the job ends at "
             "150 s and the child, orphaned, keeps the memory",
             [JobSpec("train", HEALTHY + ["--leave-child-holding", "--exit-after-s", str(ONSET)])],
             [Label("leftover_process", ONSET)], 900),
    Scenario("tfdata_healthy", "tf.data: parallel map (AUTOTUNE) and prefetch (AUTOTUNE) of small "
             "JPEGs feed 100 ms steps: GPU ~95%",
             [tf_job()], [], 360),
    Scenario("tfdata_starved", "tf.data: then map(py_function(decode_image)) (PIL decode and resize "
             "of 1024px JPEGs), 1 call, no prefetch, optimisations off: ~2 s per batch of 64, "
             "20 ms steps, GPU ~1%",
             [tf_job("--after", "starved", "--onset-s", str(ONSET), "--after-step-kernel", "0.02")],
             [Label("input_starved", ONSET), Label("single_thread_bound", ONSET)], 360),
    Scenario("tfdata_input_bound", "tf.data: then a serial tf-native map of 512px JPEGs, no "
             "prefetch, optimisations off: 70-115 ms of CPU per batch of 32 (fast to slow host), "
             "35 ms steps, GPU a steady ~23-33% (less on a loaded host), well under input_bound's 50%",
             [tf_job("--after", "serial", "--onset-s", str(ONSET), "--after-batch-size", "32",
                     "--after-step-kernel", "0.035")],
             [Label("input_bound", ONSET)], 450),
    Scenario("torch_loader_inline", "PyTorch: then DataLoader(num_workers=0): __getitem__ (PIL "
             "decode, a per-pixel Python loop) runs in the training process, ~80 ms a batch of 32 "
             "(the main thread ~70% of a core), 35 ms steps: GPU ~30% (up to ~40% on a faster host)",
             [torch_job("--workers", "0", "--batch-size", "32")], [Label("input_bound", ONSET)], 330),
    Scenario("torch_loader_one_worker", "PyTorch: then DataLoader(num_workers=1): its one worker "
             "process (pt_data_worker) is pinned at a full core, ~140 ms a batch of 56, 35 ms "
             "steps: GPU ~25%",
             [torch_job("--workers", "1", "--batch-size", "56")],
             [Label("input_bound", ONSET), Label("single_thread_bound", ONSET)], 330),
    Scenario("torch_main_deadlock", "PyTorch: then the training loop deadlocks on a lock a helper "
             "thread keeps: GPU idle, CPU ~0, no output; its stacks stand still",
             [torch_job("--hang", "main")], [Label("idle_no_progress", ONSET)], 480),
    Scenario("torch_worker_hung", "PyTorch: then DataLoader(num_workers=1) whose one worker blocks "
             "forever in __getitem__ (a shard read that never completes): the loop waits for its "
             "batch, GPU idle, no output",
             [torch_job("--hang", "worker", "--workers", "1")], [Label("idle_no_progress", ONSET)], 480),
    Scenario("torch_compile", "PyTorch: then torch.compile warms up (Dynamo, Inductor building C++ "
             "for the CPU): the GPU idles while one thread burns a core, as if starved, then steps "
             "run through the compiled model: the phase `compiling`, no stall",
             [torch_job("--compile", "once", "--compile-cache", "{workdir}/inductor")], [], 330),
    Scenario("tfdata_cache_memory", "tf.data: then cache() in memory fills the job's 768 MiB "
             "memory cgroup to 128 MiB below its limit (~430 MiB of images, full at ~190-210 s); "
             "then a thread rewrites a 512 MiB checkpoint file: reclaim waits on writeback "
             "(PSI memory)",
             [tf_job("--after", "cached", "--after-batch-size", "16", "--onset-s", str(ONSET),
                     "--cache-room-mib", "128", "--rewrite-file", "{workdir}/checkpoint.bin",
                     "--rewrite-mib", "512", memory_limit_mib=768, write_mib_per_s=20)],
             [Label("host_memory_pressure", ONSET + 60)], 480),
]}


def missing_module(module, python=sys.executable):
    """True when `python` cannot import `module` (not imported here: TensorFlow is slow)."""
    if python == sys.executable:
        return importlib.util.find_spec(module) is None
    check = f"import importlib.util, sys; sys.exit(importlib.util.find_spec({module!r}) is None)"
    return subprocess.run([python, "-c", check], stdin=subprocess.DEVNULL).returncode != 0


def unavailable_reason(scenario, workdir, python=sys.executable):
    """None if `scenario` can run here with `workdir` (jobs run by `python`), else why not."""
    for job in scenario.jobs:
        for module in job.modules:
            if missing_module(module, python):
                return (f"Python module {module} is not installed for {python} "
                        "(scripts/install-test-deps installs tests/requirements-*.txt into tests/.venv)")
        if job.memory_limit_mib and (reason := cgroups.available("memory")):
            return reason
        if job.read_mib_per_s or job.write_mib_per_s:
            if reason := cgroups.available("blkio", str(workdir)):
                return reason
        if job.cpus and os.cpu_count() < 2:
            return "taskset needs at least 2 CPUs to leave one free"
    return None


def main(argv=None):
    p = argparse.ArgumentParser(description="Labelled stall scenarios for stallwatch.")
    sub = p.add_subparsers(dest="command", required=True)
    sub.add_parser("list")
    r = sub.add_parser("run")
    r.add_argument("name", choices=sorted(SCENARIOS))
    r.add_argument("--time-scale", type=float, default=1.0)
    r.add_argument("--scenario-file", required=True, help="the stand-in NVML scenario file to write")
    r.add_argument("--duration-s", type=float, help="wall seconds (default: the scaled duration)")
    r.add_argument("--workdir", help="default: a temporary folder, removed afterwards")
    a = p.parse_args(argv)
    if a.command == "list":
        for s in SCENARIOS.values():
            labels = ", ".join(f"{l.kind}@{l.onset_s:g}s" for l in s.labels) or "(nothing fires)"
            reason = unavailable_reason(s, tempfile.gettempdir())
            print(f"{s.name:22} {s.duration_s:5g}s  {labels}")
            print(f"{'':22} {s.description}" + (f"\n{'':22} UNAVAILABLE: {reason}" if reason else ""))
        return 0
    return run_cli(a)


def run_cli(a):
    import time
    from orchestrator import ScenarioUnavailable, run_scenario
    with tempfile.TemporaryDirectory(prefix="stallwatch-scenario-") as tmp:
        workdir = Path(a.workdir or tmp)
        try:
            run = run_scenario(a.name, workdir, Path(a.scenario_file).resolve(), a.time_scale)
        except ScenarioUnavailable as e:
            print(f"unavailable: {e}", file=sys.stderr)
            return 2
        try:
            duration = a.duration_s if a.duration_s is not None else run.duration_s
            print(f"scenario {a.name}: labels {run.labels}; jobs "
                  + ", ".join(f"{n}={j.pid}" for n, j in run.jobs.items()), flush=True)
            while run.elapsed() < duration:
                run.sleep_until(int(run.elapsed()) + 1)
                gpus = run.latest["gpus"]
                print(f"t={run.elapsed():6.1f}s " + "  ".join(
                    f"gpu{i} util {g['utilization_gpu']:3d}% {g['power_mw'] / 1000:4.0f} W "
                    f"{g['memory_used_bytes'] >> 30:2d} GiB pids {[p['pid'] for p in g['processes']]}"
                    for i, g in enumerate(gpus)), flush=True)
        except KeyboardInterrupt:
            pass
        finally:
            run.stop()
        for e in run.errors:
            print(f"error: {e}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
