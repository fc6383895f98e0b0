"""What a failed scenario run leaves in its assertion message: the frames the
daemon saw, as a timeline, and the jobs' last output lines. CI keeps only the
test's output, so a failure that timing or the machine made must explain
itself there."""

import json


def _ratio(value):
    return "-" if value is None else f"{value:.2f}"


def _frame_line(frame, t0):
    host = frame.get("host", {})
    total, avail = host.get("memory_total_bytes"), host.get("memory_available_bytes")
    gpus = " ".join(f"gpu{g['index']}={_ratio(g.get('utilization', g.get('sm_active')))}"
                    for g in frame.get("gpus", []))
    jobs = []
    for j in frame.get("jobs", []):
        top = j.get("top_threads") or [{}]
        jobs.append(f"{j['pid']}:cpu={_ratio(j.get('cpu_cores'))},"
                    f"top={top[0].get('name', '-')}@{_ratio(top[0].get('cpu'))},"
                    f"rss={j.get('rss_bytes', 0) >> 20}M,D={j.get('threads_disk_sleep', 0)}")
    mem = _ratio(avail / total) if total and avail is not None else "-"
    return (f"{frame['t'] - t0:6.1f}s {gpus} host cpu={_ratio(host.get('cpu_utilization'))} "
            f"steal={_ratio(host.get('cpu_steal'))} psi cpu/io/mem={_ratio(host.get('psi_cpu_some'))}/"
            f"{_ratio(host.get('psi_io_some'))}/{_ratio(host.get('psi_memory_some'))} "
            f"avail={mem} jobs [{' '.join(jobs)}]")


def timeline(frames_path, t0, every_s=2.5):
    """One line per `every_s` seconds of the recorded frames (relative to t0)."""
    lines, next_t = [], None
    try:
        with open(frames_path) as f:
            for raw in f:
                try:
                    frame = json.loads(raw)
                except ValueError:
                    continue
                if next_t is None or frame["t"] >= next_t:
                    lines.append(_frame_line(frame, t0))
                    next_t = frame["t"] + every_s
    except OSError as e:
        return [f"no frames: {e}"]
    return lines


def job_output(run, lines=8):
    """The last `lines` lines of each job's stdout and stderr."""
    out = []
    for name, job in run.jobs.items():
        for label, path in (("stdout", job.stdout_path), ("stderr", job.stderr_path)):
            try:
                tail = path.read_text(errors="replace").splitlines()[-lines:]
            except OSError as e:
                tail = [f"({e})"]
            out.append(f"{name} {label}:")
            out += [f"  {line[:200]}" for line in tail]
    return out
