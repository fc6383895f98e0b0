"""A simulated fleet's hourly GPU-time series, as the hourly recording rules would have
recorded them (docs/goodput.md#fleet), with their truth: written as OpenMetrics,
backfilled into a TSDB with `promtool tsdb create-blocks-from openmetrics` and served by a
real Prometheus, for `stallwatch fleet goodput` to read (tests/e2e/test_fleet_goodput.py,
scripts/bench-fleet-goodput).

Hosts come in blocks that run the same jobs at the same time. A block's hosts go through
jobs one after another: a rank of a run on all its GPUs (12 to 72 hours), two notebooks on
half the GPUs each (no run), or no job (1 to 8 hours). Each host records, per hour and per
owner of its GPUs, the GPU-seconds of every state (zeros too), as
`instance_namespace_user_run_state:stallwatch_gpu_time_seconds:increase1h`. Each run
records the sum over its hosts, with part of its productive time booked to
`waiting_for_peers` with its straggler's kind when it has one
(`run_state:stallwatch_gpu_time_seconds:increase1h`), and its lost progress when it
restarted (`run:stallwatch_gpu_lost_progress_seconds:increase1h`). The coarser hourly sums
are written too: each host's by state (`instance_state:...`) and each owner's over its
hosts (`namespace_user_run_state:...`).
"""

import random
import shutil
import subprocess
from collections import defaultdict
from pathlib import Path

STATES = ["productive", "no_job", "unknown", "startup", "compiling", "checkpointing",
          "input", "hung", "fault", "idle", "recovery"]
LOST_STATES = ["unknown", "startup", "compiling", "checkpointing", "input", "hung", "fault", "idle"]
WAITING = "waiting_for_peers"
CAUSES = ["input_bound", "input_starved", "single_thread_bound", "io_bound", "slow_rank"]
HOST_RULE = "instance_namespace_user_run_state:stallwatch_gpu_time_seconds:increase1h"
RUN_RULE = "run_state:stallwatch_gpu_time_seconds:increase1h"
PROGRESS_RULE = "run:stallwatch_gpu_lost_progress_seconds:increase1h"
INSTANCE_RULE = "instance_state:stallwatch_gpu_time_seconds:increase1h"
OWNER_RULE = "namespace_user_run_state:stallwatch_gpu_time_seconds:increase1h"


class Truth:
    """GPU-seconds by group and (state, cause), for each grouping, and runs' lost progress."""

    def __init__(self):
        self.by = {b: defaultdict(lambda: defaultdict(float)) for b in ("namespace", "user", "instance", "run")}
        self.lost_progress = defaultdict(float)

    def fleet(self, by):
        total = defaultdict(float)
        for ledger in self.by[by].values():
            for key, v in ledger.items():
                total[key] += v
        return total

    @staticmethod
    def summary(ledger):
        """GPU-hours, lost GPU-hours, goodput, ETTR and the main lost (state, cause)."""
        total = sum(ledger.values())
        productive = sum(v for (s, _), v in ledger.items() if s == "productive")
        no_job = sum(v for (s, _), v in ledger.items() if s == "no_job")
        lost = {k: v for k, v in ledger.items() if k[0] not in ("productive", "no_job") and v > 0}
        main = max(lost, key=lambda k: (lost[k], k)) if lost else None
        return {
            "gpu_hours": total / 3600,
            "lost_gpu_hours": (total - productive - no_job) / 3600,
            "goodput": productive / total if total else None,
            "ettr": productive / (total - no_job) if total - no_job else None,
            "main_lost": main,
        }

    def ranked(self, by):
        """The groups, most lost first (as the command ranks them), with their summaries."""
        rows = [(name, self.summary(ledger)) for name, ledger in self.by[by].items()]
        rows.sort(key=lambda r: (-r[1]["lost_gpu_hours"], -r[1]["gpu_hours"], r[0] is not None, r[0] or ""))
        return rows


def _split(rng, seconds, productive_share, lost_states):
    """`seconds` split over the states: most productive, the rest over a few lost states."""
    out = dict.fromkeys(STATES, 0)
    productive = int(seconds * productive_share)
    out["productive"] = productive
    rest = seconds - productive
    chosen = rng.sample(lost_states, 2)
    first = rng.randint(0, rest)
    out[chosen[0]] += first
    out[chosen[1]] += rest - first
    return out


class Fleet:
    """The simulated fleet: its series (label dicts with their hourly values) and truth."""

    def __init__(self, hosts, gpus=8, hours=168, end=0, seed=7, teams=12, users=40, block_hosts=(4, 32)):
        rng = random.Random(seed)
        self.hosts, self.gpus, self.hours, self.end = hosts, gpus, hours, end
        self.times = [end - (hours - 1 - k) * 3600 for k in range(hours)]
        self.truth = Truth()
        # (labels tuple) -> {hour index: value}
        self.host_series = defaultdict(dict)
        self.run_series = defaultdict(dict)
        self.progress_series = defaultdict(dict)
        self.instance_series = defaultdict(dict)
        self.owner_series = defaultdict(dict)
        self.runs = 0
        names = [f"gpu-node-{i:04d}" for i in range(hosts)]
        i = 0
        while i < hosts:
            size = min(rng.randint(*block_hosts), hosts - i)
            self._block(rng, names[i:i + size], teams, users)
            i += size

    def _block(self, rng, names, teams, users):
        gpu_seconds = self.gpus * 3600
        h = -rng.randint(0, 24)  # the first job began before the range
        while h < self.hours:
            pick = rng.random()
            if pick < 0.12:
                kind, length = "no_job", rng.randint(1, 8)
            elif pick < 0.25:
                kind, length = "notebooks", rng.randint(6, 24)
            else:
                kind, length = "run", rng.randint(12, 72)
            span = range(max(h, 0), min(h + length, self.hours))
            if kind == "no_job":
                for name in names:
                    for k in span:
                        self._host(name, {}, k, {**dict.fromkeys(STATES, 0), "no_job": gpu_seconds})
            elif kind == "notebooks":
                owners = [{"namespace": f"team-{rng.randrange(teams):02d}", "user": f"user{rng.randrange(users):02d}"}
                          for _ in range(2)]
                for name in names:
                    for k in span:
                        for owner in owners:
                            share = rng.uniform(0.3, 0.8)
                            self._host(name, owner, k, _split(rng, gpu_seconds // 2, share, ["idle", "input", "startup"]))
            else:
                self._run(rng, names, span, teams, users, gpu_seconds)
            h += length

    def _run(self, rng, names, span, teams, users, gpu_seconds):
        self.runs += 1
        run = f"slurm:{100000 + self.runs}.0"
        owner = {"namespace": f"team-{rng.randrange(teams):02d}", "user": f"user{rng.randrange(users):02d}", "run": run}
        straggler = rng.random() < 0.3
        cause = rng.choice(CAUSES)
        base = rng.uniform(0.55, 0.95)
        restart = rng.choice(list(span)) if span and rng.random() < 0.3 else None
        for k in span:
            whole = dict.fromkeys(STATES, 0)
            for name in names:
                ledger = _split(rng, gpu_seconds, min(base * rng.uniform(0.9, 1.1), 1.0), LOST_STATES)
                if k == restart:
                    moved = ledger["productive"] // 4
                    ledger["productive"] -= moved
                    ledger["recovery"] += moved
                self._host(name, owner, k, ledger)
                for s, v in ledger.items():
                    whole[s] += v
            keyed = {(s, None): v for s, v in whole.items()}
            if straggler:
                waited = int(whole["productive"] * rng.uniform(0.1, 0.3))
                keyed[("productive", None)] -= waited
                keyed[(WAITING, cause)] = waited
            for (s, c), v in keyed.items():
                labels = (("run", run), ("state", s)) + ((("cause", c),) if c else ())
                self.run_series[labels][k] = v
                self.truth.by["run"][run][(s, c)] += v
            if k == restart:
                lost = gpu_seconds * len(names) * rng.randint(1, 3) / 4
                self.progress_series[(("run", run),)][k] = lost
                self.truth.lost_progress[run] += lost

    def _host(self, name, owner, k, ledger):
        for s, v in ledger.items():
            labels = (("instance", name),) + tuple(sorted(owner.items())) + (("state", s),)
            series = self.host_series[labels]
            series[k] = series.get(k, 0) + v
            for table, key in ((self.instance_series, (("instance", name), ("state", s))),
                               (self.owner_series, tuple(sorted(owner.items())) + (("state", s),))):
                table[key][k] = table[key].get(k, 0) + v
            for by in ("namespace", "user", "instance"):
                group = name if by == "instance" else owner.get(by)
                self.truth.by[by][group][(s, None)] += v

    def series_count(self):
        """Series of the hosts' rules (each host's by owner, each host's, each owner's), and of the runs'."""
        return (len(self.host_series) + len(self.instance_series) + len(self.owner_series),
                len(self.run_series) + len(self.progress_series))

    def tables(self):
        return ((HOST_RULE, self.host_series), (INSTANCE_RULE, self.instance_series),
                (OWNER_RULE, self.owner_series), (RUN_RULE, self.run_series),
                (PROGRESS_RULE, self.progress_series))

    def write_openmetrics(self, path):
        """All series, each with its samples in time order, ending in # EOF."""
        with open(path, "w") as out:
            for metric, table in self.tables():
                out.write(f"# TYPE {metric} gauge\n")
                for labels, values in table.items():
                    text = ",".join(f'{k}="{v}"' for k, v in labels)
                    for k in sorted(values):
                        out.write(f"{metric}{{{text}}} {values[k]} {self.times[k]}\n")
            out.write("# EOF\n")


def backfill(openmetrics, tsdb):
    """Blocks from the file, 18 hours each at most (the largest a Prometheus with the
    default 15 days' retention compacts into)."""
    promtool = shutil.which("promtool")
    assert promtool, "promtool not installed: run scripts/install-test-deps"
    Path(tsdb).mkdir(parents=True, exist_ok=True)
    r = subprocess.run([promtool, "tsdb", "create-blocks-from", "openmetrics", "--max-block-duration=24h",
                        str(openmetrics), str(tsdb)], capture_output=True, text=True, timeout=3600)
    assert r.returncode == 0, r.stdout + r.stderr


def _close(a, b):
    if a is None or b is None:
        return a is b
    return abs(a - b) <= 1e-9 * max(1.0, abs(a), abs(b))


def check(got, fleet, by, hours=168):
    """What in `stallwatch fleet goodput --json --by BY` differs from the truth (an empty
    list when nothing does): the fleet's GPU-hours, goodput, ETTR and lost GPU-hours, every
    state (a run's waits for peers by cause), and the groups listed, in order, with their
    GPU-hours, lost GPU-hours, idle GPU-hours, main lost state and, for runs, lost progress."""
    truth = fleet.truth
    whole = truth.summary(truth.fleet(by))
    problems = []

    def differ(what, a, b):
        if not _close(a, b):
            problems.append(f"{what}: {a} where the truth is {b}")

    if got["hours_recorded"] != hours:
        problems.append(f"hours_recorded: {got['hours_recorded']} where the truth is {hours}")
    for key in ("gpu_hours", "goodput", "ettr", "lost_gpu_hours"):
        differ(key, got.get(key), whole[key])
    states = {(s["state"], s.get("cause")): s["gpu_hours"] for s in got["states"]}
    expected = {(s, None): 0.0 for s in STATES}
    expected.update({k: v / 3600 for k, v in truth.fleet(by).items()})
    if by == "run" and not any(s == WAITING for s, _ in expected):
        expected[(WAITING, None)] = 0.0
    if set(states) != set(expected):
        problems.append(f"states: {sorted(states, key=str)} where the truth has {sorted(expected, key=str)}")
    for key in set(states) & set(expected):
        differ(f"state {key}", states[key], expected[key])
    ranked = truth.ranked(by)
    if got["groups_total"] != len(ranked):
        problems.append(f"groups_total: {got['groups_total']} where the truth has {len(ranked)}")
    names = [g["name"] for g in got["groups"]]
    if names != [name for name, _ in ranked[:len(names)]]:
        problems.append(f"groups: {names} where the truth ranks {[n for n, _ in ranked[:len(names)]]}")
    for g, (name, want) in zip(got["groups"], ranked):
        differ(f"{name} gpu_hours", g["gpu_hours"], want["gpu_hours"])
        differ(f"{name} lost_gpu_hours", g["lost_gpu_hours"], want["lost_gpu_hours"])
        differ(f"{name} idle_gpu_hours", g["idle_gpu_hours"], truth.by[by][name].get(("idle", None), 0.0) / 3600)
        main = g.get("main_lost")
        if (main and (main["state"], main.get("cause"))) != want["main_lost"]:
            problems.append(f"{name} main_lost: {main} where the truth is {want['main_lost']}")
        if by == "run":
            differ(f"{name} lost progress", g.get("lost_progress_gpu_hours", 0.0),
                   truth.lost_progress.get(name, 0.0) / 3600)
    if by == "run":
        differ("lost_progress_gpu_hours", got["lost_progress_gpu_hours"], sum(truth.lost_progress.values()) / 3600)
    return problems
