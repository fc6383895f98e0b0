//! Which distributed run a job belongs to, and its rank in it, from the
//! launcher's variables in `/proc/<pid>/environ`. The environment is the
//! job's own and can hold anything (secrets beside the launcher's
//! variables, megabytes of it): it is read in fixed-size chunks and parsed as
//! a stream, an allowlist of names is kept (each value at most
//! [`MAX_VALUE`] bytes of a plain charset; `TF_CONFIG` at most
//! [`MAX_TF_CONFIG`]), and every other variable is dropped as it streams
//! past, never kept beyond the chunk it was in, never shown. The same read
//! gives the job's Slurm account (`SLURM_JOB_ACCOUNT`).

use std::collections::HashMap;
use std::io::Read;

use serde::Deserialize;

use super::per_process::PerProcess;
use crate::privileges;
use crate::sample::job::{Rank, RankRead};

/// Longest value kept of an allowlisted variable.
pub const MAX_VALUE: usize = 256;
/// Longest `TF_CONFIG` kept (it lists every task's address).
pub const MAX_TF_CONFIG: usize = 64 << 10;
/// Most of an environment read.
pub const MAX_ENVIRON: usize = 8 << 20;
const CHUNK: usize = 64 << 10;

/// The launcher variables read; nothing else is kept.
pub const ALLOWLIST: &[&str] = &[
    // torchrun / torch.distributed
    "TORCHELASTIC_RUN_ID",
    "RANK",
    "LOCAL_RANK",
    "WORLD_SIZE",
    "GROUP_RANK",
    "MASTER_ADDR",
    "MASTER_PORT",
    // Slurm
    "SLURM_JOB_ID",
    "SLURM_STEP_ID",
    "SLURM_PROCID",
    "SLURM_LOCALID",
    "SLURM_NODEID",
    "SLURM_NTASKS",
    "SLURM_JOB_ACCOUNT",
    // Open MPI, PMIx, PMI
    "OMPI_COMM_WORLD_RANK",
    "OMPI_COMM_WORLD_SIZE",
    "OMPI_COMM_WORLD_LOCAL_RANK",
    "PMIX_NAMESPACE",
    "PMIX_RANK",
    "PMI_RANK",
    "PMI_SIZE",
    // Kubernetes Indexed Jobs, JobSet, Kubeflow
    "JOB_COMPLETION_INDEX",
    "PET_NODE_RANK",
    "PET_NNODES",
    // TensorFlow, JAX, DeepSpeed
    "TF_CONFIG",
    "JAX_COORDINATOR_ADDRESS",
    "JAX_PROCESS_ID",
    "JAX_NUM_PROCESSES",
    "CROSS_RANK",
];

/// Streams `input` (an environ: `NAME=value` entries separated by NUL) and
/// keeps the allowlisted variables. `Err` names what was refused.
pub fn allowlisted(mut input: impl Read) -> Result<HashMap<&'static str, String>, String> {
    let mut kept: HashMap<&'static str, String> = HashMap::new();
    // The entry being assembled, only while its name is allowlisted (or
    // still too short to tell).
    let mut entry: Vec<u8> = Vec::new();
    let mut skipping = false;
    let mut chunk = vec![0u8; CHUNK];
    let mut total = 0usize;
    loop {
        let n = match input.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(format!("the environment could not be read ({e})")),
        };
        total += n;
        for &byte in &chunk[..n] {
            if byte == 0 {
                if !skipping {
                    keep(&entry, &mut kept)?;
                }
                entry.clear();
                skipping = false;
                continue;
            }
            if skipping {
                continue;
            }
            entry.push(byte);
            match wanted(&entry) {
                Wanted::Yes => {}
                Wanted::No => skipping = true,
                Wanted::TooLong(name, limit) => {
                    return Err(format!("{name} is longer than {limit} bytes"));
                }
            }
        }
        if total >= MAX_ENVIRON {
            break;
        }
    }
    if !skipping {
        keep(&entry, &mut kept)?;
    }
    Ok(kept)
}

enum Wanted {
    Yes,
    No,
    TooLong(&'static str, usize),
}

/// Whether `entry` (so far) can still be an allowlisted variable, and
/// whether its value has outgrown its bound.
fn wanted(entry: &[u8]) -> Wanted {
    match entry.iter().position(|&b| b == b'=') {
        None if ALLOWLIST
            .iter()
            .any(|name| name.as_bytes().starts_with(entry)) =>
        {
            Wanted::Yes
        }
        None => Wanted::No,
        Some(eq) => match ALLOWLIST.iter().find(|n| n.as_bytes() == &entry[..eq]) {
            None => Wanted::No,
            Some(name) => {
                let limit = limit(name);
                if entry.len() - eq - 1 > limit {
                    Wanted::TooLong(name, limit)
                } else {
                    Wanted::Yes
                }
            }
        },
    }
}

fn limit(name: &str) -> usize {
    if name == "TF_CONFIG" {
        MAX_TF_CONFIG
    } else {
        MAX_VALUE
    }
}

fn keep(entry: &[u8], kept: &mut HashMap<&'static str, String>) -> Result<(), String> {
    let Some(eq) = entry.iter().position(|&b| b == b'=') else {
        return Ok(());
    };
    let Some(name) = ALLOWLIST.iter().find(|n| n.as_bytes() == &entry[..eq]) else {
        return Ok(());
    };
    let value = &entry[eq + 1..];
    let plain = |b: &u8| b.is_ascii_alphanumeric() || b"._:/@+-,[]".contains(b);
    if *name != "TF_CONFIG" && !value.iter().all(plain) {
        return Err(format!(
            "{name} holds characters other than letters, digits and ._:/@+-,[]"
        ));
    }
    let value = String::from_utf8(value.to_vec()).map_err(|_| format!("{name} is not UTF-8"))?;
    kept.insert(name, value);
    Ok(())
}

fn number(vars: &HashMap<&str, String>, name: &str) -> Result<Option<u32>, String> {
    match vars.get(name) {
        None => Ok(None),
        Some(v) => v
            .parse::<u32>()
            .map(Some)
            .map_err(|_| format!("{name}={v} is not a number")),
    }
}

/// The first of `names` that is set, as a number.
fn first_number(vars: &HashMap<&str, String>, names: &[&str]) -> Result<Option<u32>, String> {
    for name in names {
        if let Some(n) = number(vars, name)? {
            return Ok(Some(n));
        }
    }
    Ok(None)
}

/// `TF_CONFIG`'s task as a global rank among the cluster's tasks (chief
/// first, then workers), the world size, and the run (the first task's
/// address).
fn tf_config(text: &str) -> Result<(u32, u32, String), String> {
    #[derive(Deserialize)]
    struct Task {
        #[serde(rename = "type")]
        kind: String,
        index: u32,
    }
    #[derive(Deserialize)]
    struct TfConfig {
        cluster: HashMap<String, Vec<String>>,
        task: Task,
    }
    let config: TfConfig =
        serde_json::from_str(text).map_err(|e| format!("TF_CONFIG is not valid ({e})"))?;
    let order = ["chief", "master", "worker"];
    let mut offset = 0u32;
    let mut rank = None;
    for kind in order {
        let tasks = config.cluster.get(kind).map_or(0, Vec::len) as u32;
        if config.task.kind == kind {
            rank = Some(offset + config.task.index);
        }
        offset += tasks;
    }
    let rank = rank.ok_or_else(|| {
        format!(
            "TF_CONFIG's task type `{}` takes no part in training steps",
            config.task.kind.chars().take(32).collect::<String>()
        )
    })?;
    let first = order
        .iter()
        .find_map(|k| config.cluster.get(*k).and_then(|t| t.first()))
        .ok_or("TF_CONFIG's cluster lists no task")?;
    Ok((rank, offset, first.chars().take(MAX_VALUE).collect()))
}

fn loopback(addr: &str) -> bool {
    addr == "localhost"
        || addr.starts_with("127.")
        || addr == "::1"
        || addr.starts_with("[::1]")
        || addr == "0.0.0.0"
}

/// The run and rank the launcher variables make. `host` qualifies a
/// rendezvous address on loopback (a single-host run), which every host's
/// runs would share otherwise.
pub fn rank_of(vars: &HashMap<&'static str, String>, host: &str) -> RankRead {
    if vars.is_empty() {
        return RankRead::None;
    }
    match derive(vars, host) {
        Ok(Some(rank)) => RankRead::Found(rank),
        Ok(None) => RankRead::None,
        Err(why) => RankRead::Unknown(why),
    }
}

fn derive(vars: &HashMap<&'static str, String>, host: &str) -> Result<Option<Rank>, String> {
    let has = |name: &str| vars.contains_key(name);
    let mut tf = None;
    if let Some(text) = vars.get("TF_CONFIG") {
        tf = Some(tf_config(text)?);
    }
    let rank = match first_number(
        vars,
        &[
            "RANK",
            "OMPI_COMM_WORLD_RANK",
            "PMIX_RANK",
            "PMI_RANK",
            "SLURM_PROCID",
            "JAX_PROCESS_ID",
        ],
    )? {
        Some(r) => r,
        None => match &tf {
            Some((r, _, _)) => *r,
            // A job index alone (an Indexed Job) says no run.
            None => return Ok(None),
        },
    };
    let world_size = match first_number(
        vars,
        &[
            "WORLD_SIZE",
            "OMPI_COMM_WORLD_SIZE",
            "PMI_SIZE",
            "SLURM_NTASKS",
            "SLURM_JOB_ACCOUNT",
            "JAX_NUM_PROCESSES",
        ],
    )? {
        Some(w) => Some(w),
        None => tf.as_ref().map(|(_, w, _)| *w),
    };
    if let Some(w) = world_size
        && (w == 0 || rank >= w)
    {
        return Err(format!("rank {rank} is not below the world size {w}"));
    }
    let local_rank = first_number(
        vars,
        &["LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID"],
    )?;
    let launcher = if has("TORCHELASTIC_RUN_ID") || has("GROUP_RANK") {
        "torchrun"
    } else if has("CROSS_RANK") {
        "deepspeed"
    } else if has("RANK") {
        "torch"
    } else if has("OMPI_COMM_WORLD_RANK") || has("PMIX_RANK") || has("PMI_RANK") {
        "mpi"
    } else if has("SLURM_PROCID") {
        "slurm"
    } else if has("JAX_PROCESS_ID") {
        "jax"
    } else {
        "tensorflow"
    };
    let run = run_id(vars, host, tf.as_ref().map(|(_, _, first)| first.as_str()))
        .ok_or_else(|| format!("rank {rank} of a {launcher} run, but no variable names the run"))?;
    Ok(Some(Rank {
        run,
        rank,
        local_rank,
        world_size,
        launcher: launcher.to_owned(),
    }))
}

/// The scheduler's job and step; else the rendezvous id; else the
/// rendezvous address.
fn run_id(
    vars: &HashMap<&'static str, String>,
    host: &str,
    tf_first: Option<&str>,
) -> Option<String> {
    if let Some(job) = vars.get("SLURM_JOB_ID") {
        return Some(match vars.get("SLURM_STEP_ID") {
            Some(step) => format!("slurm:{job}.{step}"),
            None => format!("slurm:{job}"),
        });
    }
    if let Some(id) = vars.get("TORCHELASTIC_RUN_ID").filter(|id| *id != "none") {
        return Some(format!("torchelastic:{id}"));
    }
    if let Some(ns) = vars.get("PMIX_NAMESPACE") {
        return Some(format!("pmix:{ns}"));
    }
    let address = match (vars.get("MASTER_ADDR"), vars.get("MASTER_PORT")) {
        (Some(a), Some(p)) => Some(format!("{a}:{p}")),
        (Some(a), None) => Some(a.clone()),
        _ => vars
            .get("JAX_COORDINATOR_ADDRESS")
            .cloned()
            .or_else(|| tf_first.map(str::to_owned)),
    }?;
    Some(if loopback(&address) {
        format!("{host}/{address}")
    } else {
        address
    })
}

/// Reads `environ` and says what run and rank it makes.
pub fn read(environ: impl Read, host: &str) -> RankRead {
    read_env(environ, host).rank
}

/// What a job's environment says of it: its run and rank, and its Slurm
/// account (`SLURM_JOB_ACCOUNT`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JobEnv {
    pub rank: RankRead,
    pub slurm_account: Option<String>,
}

/// Reads `environ` once: the run and rank it makes, and the Slurm account.
pub fn read_env(environ: impl Read, host: &str) -> JobEnv {
    match allowlisted(environ) {
        Ok(mut vars) => JobEnv {
            slurm_account: vars.remove("SLURM_JOB_ACCOUNT"),
            rank: rank_of(&vars, host),
        },
        Err(why) => JobEnv {
            rank: RankRead::Unknown(why),
            slurm_account: None,
        },
    }
}

/// Each job's environment, read once per process (pid and start time) while
/// it holds a GPU.
#[derive(Debug, Clone, Default)]
pub struct Ranks {
    host: Option<String>,
    by_process: PerProcess<JobEnv>,
}

impl Ranks {
    /// Starts a sample: forgets the leaders not seen in the previous one.
    pub fn begin(&mut self) {
        self.by_process.begin();
    }

    /// What `pid`'s environment says, read from `root/<pid>/environ` the
    /// first time this process (started at `start_ticks`) is asked for.
    pub fn get(&mut self, root: &std::path::Path, pid: u32, start_ticks: u64) -> JobEnv {
        let host = self.host.get_or_insert_with(|| {
            std::fs::read_to_string(root.join("sys/kernel/hostname"))
                .map(|h| h.trim().chars().take(MAX_VALUE).collect())
                .unwrap_or_else(|_| "localhost".into())
        });
        self.by_process.get(pid, start_ticks, || {
            match std::fs::File::open(root.join(pid.to_string()).join("environ")) {
                Ok(file) => read_env(file, host),
                Err(e) => JobEnv {
                    rank: RankRead::Unknown(match privileges::environ_refused(root, pid, &e) {
                        Some(why) => format!("the environment could not be read ({e}): {why}"),
                        None => format!("the environment could not be read ({e})"),
                    }),
                    slurm_account: None,
                },
            }
        })
    }
}

#[cfg(test)]
mod tests;
