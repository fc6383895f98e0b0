"""Lost GPU time by place, for `stallwatch fleet causes` to read from a real Prometheus.

Two fleets:

- `Hosts`: a few hosts' raw series as the daemon exports them (the lost GPU-seconds by
  place and unplaced by reason, the call times, the GPU-time ledger and the owner's
  process, job and rank series), every 15 s over 10 hours, with each series' truth.
  Written as OpenMetrics and backfilled; then the shipped recording rules
  (deploy/prometheus/stallwatch.rules.yml) are evaluated over them with `promtool tsdb
  create-blocks-from rules`, group by group (`backfill_rules`), so that the command reads
  what the rules themselves recorded (tests/e2e/test_fleet_causes.py).
- `Week`: a large fleet's hourly place series as the hourly rules would have recorded them
  over a week, with their truth, for scripts/bench-fleet-causes (the raw series of 16,000
  GPUs over a week are too many to write and evaluate here).
"""

import json
import random
import shutil
import statistics
import subprocess
import time
import urllib.parse
import urllib.request
from collections import defaultdict
from pathlib import Path

import yaml

from daemon import ROOT
from goodput_fleet import backfill  # noqa: F401 (shared with the tests and the benchmark)
from prometheus_server import PrometheusServer

RULES = ROOT / "deploy" / "prometheus" / "stallwatch.rules.yml"
DECODE = ("decode_image (data.py:42)", "PIL.Image.open")
REDUCE = ("all_reduce (train.py:88)", "torch.distributed.all_reduce")
SAVE = ("save_state (ckpt.py:10)", "")
STATE_OF = {"input_starved": "input", "input_bound": "input", "single_thread_bound": "input",
            "cpu_saturated": "input", "io_bound": "input", "busy_no_progress": "hung",
            "idle_no_progress": "hung", "spinning": "hung", "compiling": "compiling",
            "checkpointing": "checkpointing"}
LOST_STATES = ["input", "hung", "compiling", "checkpointing"]
# The rule groups a pass evaluates: each reads what the passes before it wrote.
PASSES = [["stallwatch.rules", "stallwatch.goodput"], ["stallwatch.causes"], ["stallwatch.causes.hourly"]]


def _labels(pairs):
    """OpenMetrics labels; an empty value is no label, as Prometheus stores it."""
    return ",".join(f'{k}="{v}"' for k, v in pairs if v != "")


class Gpu:
    """One GPU: its owner's job (or none), and what it loses where from when."""

    def __init__(self, instance, index, job=None, places=(), unplaced=(), calls=None):
        self.instance, self.gpu, self.uuid = instance, str(index), f"GPU-{instance}-{index}"
        self.job = job  # dict: pid, namespace, user, pod, run, rank
        self.places = list(places)  # (kind, (place, library), seconds a second, from)
        self.unplaced = list(unplaced)  # (state, reason, seconds a second, from)
        self.calls = calls or {}  # (place, library) -> seconds a call


class Hosts:
    """The e2e fleet: three hosts of 4 GPUs, from `end - 10h` to `end`.

    - run slurm:9001.0 (team-vision, alice) on every GPU of gpu-node-a and gpu-node-b,
      starved at decode_image under PIL.Image.open, 0.4 of each GPU from 20 minutes in;
      its first GPU also hung a fiftieth of the time with no stacks read;
    - run torchelastic:nlp-7 (team-nlp, bob) on two GPUs of gpu-node-c, input-bound at the
      same place (0.3 from the first hour) and spinning in all_reduce, a place only there
      (0.1 from the second hour);
    - a notebook (team-nlp, carol, no run) on the third GPU of gpu-node-c, saving a
      checkpoint in its own code (0.05 from 30 minutes in) and input time its stacks could
      not be read for (0.03);
    - the last GPU of gpu-node-c holds no job.
    """

    def __init__(self, end, hours=10, step=15):
        self.end, self.start, self.step = end, end - hours * 3600, step
        s = self.start
        self.gpus = []
        vision = {"namespace": "team-vision", "user": "alice", "run": "slurm:9001.0"}
        nlp = {"namespace": "team-nlp", "user": "bob", "run": "torchelastic:nlp-7"}
        a_calls = [0.08, 0.082, 0.085, 0.09]
        for h, host in enumerate(("gpu-node-a", "gpu-node-b")):
            for i in range(4):
                rank = 4 * h + i
                job = {**vision, "pid": str(1000 + rank), "pod": "", "rank": str(rank)}
                unplaced = [("hung", "no_read", 0.02, s + 1200)] if rank == 0 else []
                call = a_calls[i] if h == 0 else 0.12
                self.gpus.append(Gpu(host, i, job, [("input_starved", DECODE, 0.4, s + 1200)], unplaced,
                                     {DECODE: call}))
        for i in range(2):
            job = {**nlp, "pid": str(2000 + i), "pod": f"nlp-{i}", "rank": str(i)}
            self.gpus.append(Gpu("gpu-node-c", i, job,
                                 [("input_bound", DECODE, 0.3, s + 3600), ("spinning", REDUCE, 0.1, s + 7200)],
                                 calls={DECODE: 0.2, REDUCE: 2.5}))
        notebook = {"namespace": "team-nlp", "user": "carol", "run": "", "pid": "3000", "pod": "nb-0", "rank": ""}
        self.gpus.append(Gpu("gpu-node-c", 2, notebook, [("checkpointing", SAVE, 0.05, s + 1800)],
                             [("input", "no_permission", 0.03, s + 1800)]))
        self.gpus.append(Gpu("gpu-node-c", 3))

    def times(self, since=None):
        t = since if since is not None else self.start
        while t <= self.end:
            yield t
            t += self.step

    # ------------------------------------------------------------------- the truth

    def seconds(self, t0, t1, place=None, **owner):
        """GPU-seconds lost in [t0, t1] at a place (a (place, library) pair; None: every
        place), on the GPUs whose job has the owner labels given."""
        total = 0.0
        for g in self.gpus:
            if owner and not (g.job and all(g.job.get(k) == v for k, v in owner.items())):
                continue
            for _, where, rate, since in g.places:
                if place is None or where == place:
                    total += rate * max(0.0, min(t1, self.end) - max(t0, since))
        return total

    def unplaced_seconds(self, t0, t1, reason=None):
        return sum(rate * max(0.0, min(t1, self.end) - max(t0, since))
                   for g in self.gpus for _, r, rate, since in g.unplaced if reason in (None, r))

    def places(self):
        """Each place's kinds, runs, namespaces, hosts and call median over hosts."""
        out = {}
        for g in self.gpus:
            for kind, where, _, _ in g.places:
                p = out.setdefault(where, {"kinds": set(), "runs": set(), "namespaces": set(), "hosts": {}})
                p["kinds"].add(kind)
                if g.job["run"]:
                    p["runs"].add(g.job["run"])
                p["namespaces"].add(g.job["namespace"])
                if where in g.calls:
                    p["hosts"].setdefault(g.instance, []).append(g.calls[where])
                else:
                    p["hosts"].setdefault(g.instance, [])
        for p in out.values():
            medians = [statistics.median(v) for v in p["hosts"].values() if v]
            p["call"] = statistics.median(medians) if medians else None
        return out

    # ------------------------------------------------------------------- the series

    def _counter(self, out, name, labels, rate_at, since):
        """A counter from `since` (0 there) growing by rate_at(t) a second."""
        lines = out[(name, "counter")]
        text = _labels(labels)
        value, last = 0.0, None
        for t in self.times(since):
            if last is not None:
                value += rate_at(last) * (t - last)
            lines.append(f"{name}_total{{{text}}} {value:.6f} {t}\n")
            last = t

    def _gauge(self, out, name, labels, value, since):
        lines = out[(name, "gauge")]
        text = _labels(labels)
        for t in self.times(since):
            lines.append(f"{name}{{{text}}} {value} {t}\n")

    def write_openmetrics(self, path):
        """Every series, each family's together under its one TYPE line."""
        families = defaultdict(list)
        self._series(families)
        with open(path, "w") as out:
            for (name, kind), lines in families.items():
                out.write(f"# TYPE {name} {kind}\n")
                out.writelines(lines)
            out.write("# EOF\n")

    def _series(self, out):
        for g in self.gpus:
            base = [("instance", g.instance), ("job", "stallwatch"), ("gpu", g.gpu), ("uuid", g.uuid)]
            lost = defaultdict(list)  # state -> [(rate, since)]
            for kind, (place, library), rate, since in g.places:
                lost[STATE_OF[kind]].append((rate, since))
                self._counter(out, "stallwatch_gpu_lost_by_place_seconds",
                              base + [("state", STATE_OF[kind]), ("kind", kind), ("place", place),
                                      ("library", library)],
                              lambda t, r=rate: r, since)
            for state, reason, rate, since in g.unplaced:
                lost[state].append((rate, since))
                self._counter(out, "stallwatch_gpu_lost_unplaced_seconds",
                              base + [("state", state), ("reason", reason)], lambda t, r=rate: r, since)
            for (place, library), value in g.calls.items():
                self._gauge(out, "stallwatch_gpu_place_call_seconds",
                            base + [("place", place), ("library", library)], value, self.start)

            def rate_of(state, t, lost=lost):
                return sum(r for r, since in lost.get(state, []) if t >= since)

            for state in LOST_STATES:
                self._counter(out, "stallwatch_gpu_time_seconds", base + [("state", state)],
                              lambda t, s=state: rate_of(s, t), self.start)
            rest = "productive" if g.job else "no_job"
            self._counter(out, "stallwatch_gpu_time_seconds", base + [("state", rest)],
                          lambda t: 1.0 - sum(rate_of(s, t) for s in LOST_STATES), self.start)
            if g.job:
                j = g.job
                self._gauge(out, "stallwatch_process_gpu_memory_bytes",
                            base + [("pid", j["pid"]), ("comm", "python")], 8e9, self.start)
                self._gauge(out, "stallwatch_job_info",
                            [("instance", g.instance), ("job", "stallwatch"), ("pid", j["pid"]),
                             ("comm", "python"), ("namespace", j["namespace"]), ("pod", j["pod"]),
                             ("user", j["user"])], 1, self.start)
                if j["run"]:
                    self._gauge(out, "stallwatch_job_rank_info",
                                base[:3] + [("pid", j["pid"]), ("run", j["run"]), ("rank", j["rank"]),
                                            ("launcher", "slurm")], 1, self.start)


def backfill_rules(tmp, start, end, passes=PASSES, eval_interval="60s"):
    """Evaluates the shipped rule groups over [start, end] against the TSDB at tmp/data, as
    Prometheus would have: pass by pass (a rule group reading another's output needs that
    output stored first), each with `promtool tsdb create-blocks-from rules` against a
    Prometheus serving the TSDB, its blocks then moved in. A group's own `interval:` holds
    (the hourly ones evaluate once an hour); the others every `eval_interval`. promtool
    (2.42) writes nothing for a group that names its own interval, so the interval is
    given on its command line instead (the groups of a pass share one); and it stops at
    the first 2-hour block whose part in the range holds no evaluation of a group (an hourly
    group's first, where the range starts late in a block), so the range starts at a block's
    start."""
    start = start // 7200 * 7200
    groups = {g["name"]: g for g in yaml.safe_load(RULES.read_text())["groups"]}
    for n, names in enumerate(passes):
        chosen = [dict(groups[name]) for name in names]
        intervals = {g.pop("interval", eval_interval) for g in chosen}
        assert len(intervals) == 1, f"pass {n}: groups of different intervals {intervals}"
        rules = tmp / f"pass-{n}.rules.yml"
        rules.write_text(yaml.safe_dump({"groups": chosen}, sort_keys=False))
        out = tmp / f"pass-{n}"
        server = PrometheusServer(tmp, "global:\n  evaluation_interval: 1m\n")
        try:
            wait_ready(server.url)
            r = subprocess.run(
                [shutil.which("promtool"), "tsdb", "create-blocks-from", "rules", f"--start={start}",
                 f"--end={end}", f"--url={server.url}", f"--eval-interval={intervals.pop()}",
                 f"--output-dir={out}", str(rules)],
                capture_output=True, text=True, timeout=900)
            assert r.returncode == 0, f"pass {n} ({names}): " + r.stdout[-3000:] + r.stderr[-3000:]
        finally:
            server.stop()
        for block in out.iterdir():
            if block.is_dir():
                block.rename(tmp / "data" / block.name)


def sample_times(url, selector, within):
    """The times of a series' samples within the last `within`, oldest first."""
    query = urllib.parse.urlencode({"query": f"{selector}[{within}]"})
    with urllib.request.urlopen(f"{url}/api/v1/query?{query}", timeout=30) as r:
        (series,) = json.load(r)["data"]["result"]
    return [float(t) for t, _ in series["values"]]


def wait_ready(url, timeout=60):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url + "/-/ready", timeout=5) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.3)
    raise AssertionError(f"Prometheus at {url} did not get ready")


# --------------------------------------------------------------- a week of a large fleet

PLACES_1H = "namespace_user_run_state_kind_place_library:stallwatch_gpu_lost_by_place_seconds:increase1h"
UNPLACED_1H = "namespace_user_run_state_reason:stallwatch_gpu_lost_unplaced_seconds:increase1h"
HOST_PLACES_1H = "instance_place_library:stallwatch_gpu_lost_by_place_seconds:increase1h"
CALLS_1H = "instance_place_library:stallwatch_gpu_place_call_seconds:last1h"
LEDGER_1H = "instance:stallwatch_gpu_lost_seconds:increase1h"
REASONS = ["no_read", "no_permission", "not_python", "unsupported_python", "no_frames", "failed", "over_cap"]
# Lines of code that lose GPU time, with the library call under them and the kind they
# lose it to; the fleet's places are these at different lines.
TEMPLATES = [
    ("decode_image", "data", "PIL.Image.open", "input_starved"),
    ("load_sample", "data", "numpy.load", "io_bound"),
    ("__getitem__", "data", "", "single_thread_bound"),
    ("augment", "data", "cv2.imdecode", "cpu_saturated"),
    ("read_shard", "io", "pyarrow.parquet.read_table", "io_bound"),
    ("tokenize", "data", "", "input_bound"),
    ("parse_record", "data", "json.loads", "single_thread_bound"),
    ("collate", "data", "", "input_bound"),
    ("prefetch", "io", "h5py.File.__getitem__", "io_bound"),
    ("all_reduce", "train", "torch.distributed.all_reduce", "spinning"),
    ("barrier", "train", "torch.distributed.barrier", "busy_no_progress"),
    ("wait_for_peers", "train", "", "idle_no_progress"),
    ("save_state", "ckpt", "torch.save", "checkpointing"),
    ("load_state", "ckpt", "torch.load", "checkpointing"),
    ("compile_model", "model", "torch._dynamo.optimize", "compiling"),
    ("build", "model", "torch.compile", "compiling"),
]


class Week:
    """A week (--days) of --hosts hosts of --gpus GPUs, as the hourly place rules would
    have recorded it. Hosts come in blocks of 4 to 32 that run the same job one after
    another: a run on all their GPUs (12 to 72 hours), a notebook on one GPU of each host
    (6 to 24 hours), or nothing (1 to 8 hours). A job loses time at 1 to 4 places drawn
    from a pool of `places` shared ones (a few of them popular: the pool is drawn with
    weights 1/rank), each at a steady share of its GPUs (1% to 20%), plus time its stacks
    could not be placed (a reason, up to 5%). Each host's GPUs then hold a few places at
    once, never more than the daemon's cap of 32. Every hour records each place per owner
    over its hosts, each owner's unplaced time, each host's places, call times and the
    ledger's lost time (what was placed and unplaced there)."""

    def __init__(self, hosts, gpus=8, hours=168, end=0, seed=11, places=50, teams=12, users=40):
        rng = random.Random(seed)
        self.hosts, self.gpus, self.hours, self.end = hosts, gpus, hours, end
        self.times = [end - (hours - 1 - k) * 3600 for k in range(hours)]
        self.pool = []
        seen = set()
        while len(self.pool) < places:
            function, module, library, kind = rng.choice(TEMPLATES)
            where = (f"{function} ({module}.py:{rng.randint(10, 400)})", library)
            if where not in seen:
                seen.add(where)
                self.pool.append((where, kind, rng.lognormvariate(-2.5, 1.2)))
        self.weights = [1 / (k + 1) for k in range(places)]
        self.series = {name: defaultdict(dict) for name in (PLACES_1H, UNPLACED_1H, HOST_PLACES_1H, CALLS_1H, LEDGER_1H)}
        # Truth: seconds per (place key) by (state, kind), run, namespace; hosts; calls per host (last).
        self.truth = defaultdict(lambda: {"kinds": defaultdict(float), "runs": defaultdict(float),
                                          "namespaces": defaultdict(float), "by": defaultdict(float),
                                          "hosts": set(), "calls": {}})
        self.unplaced = defaultdict(lambda: defaultdict(float))  # (group labels) -> reason -> seconds
        self.runs = 0
        names = [f"gpu-node-{i:04d}" for i in range(hosts)]
        i = 0
        while i < hosts:
            size = min(rng.randint(4, 32), hosts - i)
            self._block(rng, names[i:i + size], teams, users)
            i += size

    def _block(self, rng, names, teams, users):
        h = -rng.randint(0, 24)
        while h < self.hours:
            pick = rng.random()
            if pick < 0.12:
                h += rng.randint(1, 8)
                continue
            owner = {"namespace": f"team-{rng.randrange(teams):02d}", "user": f"user{rng.randrange(users):02d}"}
            if pick < 0.25:
                length, gpus = rng.randint(6, 24), 1
                owner["run"] = ""
            else:
                self.runs += 1
                length, gpus = rng.randint(12, 72), self.gpus
                owner["run"] = f"slurm:{100000 + self.runs}.0"
            chosen = rng.choices(range(len(self.pool)), weights=self.weights, k=rng.randint(1, 4))
            losses = [(self.pool[c], rng.uniform(0.01, 0.2) / len(chosen)) for c in sorted(set(chosen))]
            unplaced = (rng.choice(REASONS), rng.uniform(0, 0.05))
            span = range(max(h, 0), min(h + length, self.hours))
            for k in span:
                for name in names:
                    self._hour(rng, name, owner, k, gpus, losses, unplaced)
            h += length

    def _add(self, name, labels, k, value):
        series = self.series[name][labels]
        series[k] = series.get(k, 0.0) + value

    def _hour(self, rng, host, owner, k, gpus, losses, unplaced):
        gpu_seconds = gpus * 3600
        ledger = 0.0
        for ((place, library), kind, call), share in losses:
            v = gpu_seconds * share * rng.uniform(0.8, 1.2)
            ledger += v
            state = STATE_OF[kind]
            o = tuple((key, owner[key]) for key in ("namespace", "user", "run"))
            self._add(PLACES_1H, o + (("state", state), ("kind", kind), ("place", place), ("library", library)), k, v)
            self._add(HOST_PLACES_1H, (("instance", host), ("place", place), ("library", library)), k, v)
            self.series[CALLS_1H][(("instance", host), ("place", place), ("library", library))][k] = round(
                call * rng.uniform(0.9, 1.1), 6)
            t = self.truth[(place, library)]
            t["kinds"][(state, kind)] += v
            if owner["run"]:
                t["runs"][owner["run"]] += v
            t["namespaces"][owner["namespace"]] += v
            for by in ("namespace", "user", "run"):
                t["by"][(by, owner[by] or None)] += v
            t["hosts"].add(host)
            t["calls"][host] = (k, self.series[CALLS_1H][(("instance", host), ("place", place), ("library", library))][k])
        reason, share = unplaced
        v = gpu_seconds * share
        ledger += v
        o = tuple((key, owner[key]) for key in ("namespace", "user", "run"))
        self._add(UNPLACED_1H, o + (("state", "input"), ("reason", reason)), k, v)
        for by in (None, "namespace", "user", "run"):
            self.unplaced[(by, owner[by] or None) if by else None][reason] += v
        self._add(LEDGER_1H, (("instance", host),), k, ledger)

    def most_places_on_a_host(self):
        """The most places one host lost time at in one hour."""
        counts = defaultdict(int)
        for labels, values in self.series[HOST_PLACES_1H].items():
            for k in values:
                counts[(labels[0][1], k)] += 1
        return max(counts.values(), default=0)

    def series_count(self):
        return {name: len(table) for name, table in self.series.items()}

    def samples(self):
        return sum(len(v) for table in self.series.values() for v in table.values())

    def write_openmetrics(self, path):
        with open(path, "w") as out:
            for name, table in self.series.items():
                out.write(f"# TYPE {name} gauge\n")
                for labels, values in table.items():
                    text = _labels(labels)
                    for k in sorted(values):
                        out.write(f"{name}{{{text}}} {values[k]} {self.times[k]}\n")
            out.write("# EOF\n")

    def ranked(self):
        """Place keys, most GPU-seconds first (ties by name), as the command ranks them."""
        total = {key: sum(t["kinds"].values()) for key, t in self.truth.items()}
        return sorted(total, key=lambda key: (-total[key], key[0], key[1] or ""))


def _close(a, b, rel=1e-6):
    return a is not None and b is not None and abs(a - b) <= rel * max(1.0, abs(a), abs(b))


def check(got, week):
    """What in `stallwatch fleet causes --json` (fleet-wide, over the whole week) differs
    from the week's truth: an empty list when nothing does."""
    problems = []
    ranked = week.ranked()
    if got["rules"] != "1h" or got["hours_recorded"] != week.hours:
        problems.append(f"rules {got['rules']}, hours {got.get('hours_recorded')}")
    if got["places_total"] != len(ranked):
        problems.append(f"places_total {got['places_total']} where the truth has {len(ranked)}")
    placed = sum(sum(t["kinds"].values()) for t in week.truth.values()) / 3600
    unplaced = sum(week.unplaced[None].values()) / 3600
    for what, a, b in (("placed", got["placed_gpu_hours"], placed), ("lost", got["lost_gpu_hours"], placed + unplaced),
                       ("ledger", got["ledger_lost_gpu_hours"], placed + unplaced)):
        if not _close(a, b):
            problems.append(f"{what}: {a} where the truth is {b}")
    reasons = {r["reason"]: r["gpu_hours"] for r in got["unplaced"]}
    for reason, v in week.unplaced[None].items():
        if not _close(reasons.get(reason), v / 3600):
            problems.append(f"unplaced {reason}: {reasons.get(reason)} where the truth is {v / 3600}")
    for p, key in zip(got["places"], ranked):
        t = week.truth[key]
        if (p["place"], p["library"] or "") != key:
            problems.append(f"place {p['place']} / {p['library']} where the truth ranks {key}")
            break
        runs = sorted(t["runs"].items(), key=lambda x: (-x[1], x[0]))[:3]
        want = {
            "gpu_hours": sum(t["kinds"].values()) / 3600, "runs": len(t["runs"]),
            "namespaces": len(t["namespaces"]), "hosts": len(t["hosts"]),
            "call_seconds": statistics.median(v for _, v in t["calls"].values()),
        }
        for field, value in want.items():
            if not (_close(p.get(field), value) if isinstance(value, float) else p.get(field) == value):
                problems.append(f"{key} {field}: {p.get(field)} where the truth is {value}")
        if [r["run"] for r in p["top_runs"]] != [r for r, _ in runs]:
            problems.append(f"{key} top runs: {p['top_runs']} where the truth is {runs}")
    return problems


def check_groups(got, week, by):
    """What in the groups of `stallwatch fleet causes --by BY --json` differs from the
    truth: each group's placed and lost GPU-hours, their order and count."""
    placed, lost = defaultdict(float), defaultdict(float)
    for t in week.truth.values():
        for (b, name), v in t["by"].items():
            if b == by:
                placed[name] += v
                lost[name] += v
    for (b, name), reasons in ((k, v) for k, v in week.unplaced.items() if k is not None):
        if b == by:
            lost[name] += sum(reasons.values())
    order = sorted(lost, key=lambda n: (-lost[n], n is not None, n or ""))
    problems = []
    if got["groups_total"] != len(order):
        problems.append(f"groups_total {got['groups_total']} where the truth has {len(order)}")
    for g, name in zip(got["groups"], order):
        if g["name"] != name:
            problems.append(f"group {g['name']} where the truth ranks {name}")
            break
        for field, value in (("placed_gpu_hours", placed[name] / 3600), ("lost_gpu_hours", lost[name] / 3600)):
            if not _close(g[field], value):
                problems.append(f"{name} {field}: {g[field]} where the truth is {value}")
    return problems
