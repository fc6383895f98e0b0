//! Host-wide counters: `<root>/stat`, `<root>/meminfo`, `<root>/pressure/*`.

use std::fs;
use std::io;
use std::path::Path;

use procfs::prelude::*;
use procfs::{CpuTime, Meminfo, ProcResult};

use super::mount::{Mount, read_kernel_stats};
use crate::sample::{CpuTimes, ErrorCounts, ErrorSource, HostMemory, HostSample, Pressure};

/// What reading `/proc/pressure/*` returns when PSI is compiled in but
/// disabled at boot (`psi=0`, or `CONFIG_PSI_DEFAULT_DISABLED`) on kernels
/// that still create the files. 95 on x86, Arm, POWER and RISC-V.
const EOPNOTSUPP: i32 = 95;

pub(super) fn read_host(reader: &Mount, errors: &mut ErrorCounts) -> HostSample {
    let root = reader.root();
    let mut host = HostSample::default();
    let stat = root.join("stat");
    let stats = read_kernel_stats(&stat, reader.ticks_per_second, reader.page_size_bytes);
    if let Some(stats) = host_value(stats, &stat, errors) {
        host.cpu = Some(cpu_times(reader, &stats.total));
        host.cores = stats
            .cpu_time
            .iter()
            .map(|t| cpu_times(reader, t))
            .collect();
        // `/proc/stat` has one `cpuN` line per online CPU.
        host.online_cpus = u32::try_from(stats.cpu_time.len()).ok();
    }
    let meminfo = root.join("meminfo");
    host.memory = host_value(Meminfo::from_file(&meminfo), &meminfo, errors).map(|m| HostMemory {
        total_bytes: m.mem_total,
        // MemAvailable is missing only before Linux 3.14; MemFree is the
        // pessimistic stand-in.
        available_bytes: m.mem_available.unwrap_or(m.mem_free),
        swap_total_bytes: m.swap_total,
        swap_free_bytes: m.swap_free,
    });
    host.pressure = read_pressure(&root.join("pressure"), errors);
    host
}

/// busy = user + nice + system + irq + softirq + steal (guest time is
/// already inside user and nice); total = busy + idle + iowait.
fn cpu_times(reader: &Mount, t: &CpuTime) -> CpuTimes {
    let busy = [
        Some(t.user),
        Some(t.nice),
        Some(t.system),
        t.irq,
        t.softirq,
        t.steal,
    ]
    .into_iter()
    .flatten()
    .fold(0u64, u64::saturating_add);
    let total = busy
        .saturating_add(t.idle)
        .saturating_add(t.iowait.unwrap_or(0));
    CpuTimes {
        busy_seconds: reader.ticks_to_seconds(busy),
        total_seconds: reader.ticks_to_seconds(total),
        steal_seconds: t.steal.map(|s| reader.ticks_to_seconds(s)),
    }
}

fn host_value<T>(result: ProcResult<T>, path: &Path, errors: &mut ErrorCounts) -> Option<T> {
    match result {
        Ok(value) => Some(value),
        Err(e) => {
            tracing::debug!(error = %e, path = %path.display(), "cannot read host file");
            errors.add(ErrorSource::ProcHost);
            None
        }
    }
}

fn read_pressure(dir: &Path, errors: &mut ErrorCounts) -> Pressure {
    let (cpu_some, cpu_full) = read_psi(&dir.join("cpu"), errors);
    let (io_some, io_full) = read_psi(&dir.join("io"), errors);
    let (memory_some, memory_full) = read_psi(&dir.join("memory"), errors);
    Pressure {
        cpu_some,
        cpu_full,
        io_some,
        io_full,
        memory_some,
        memory_full,
    }
}

/// The `some` and `full` avg10 of one PSI file, as ratios. A missing file
/// (no PSI in this kernel) or a missing line is "not available", not an error.
fn read_psi(path: &Path, errors: &mut ErrorCounts) -> (Option<f64>, Option<f64>) {
    let text = match fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if psi_unavailable(&e) => return (None, None),
        Err(e) => {
            tracing::debug!(error = %e, path = %path.display(), "cannot read pressure");
            errors.add(ErrorSource::ProcHost);
            return (None, None);
        }
    };
    let psi = parse_pressure(&text);
    for line in &psi.bad_lines {
        tracing::debug!(line, path = %path.display(), "cannot parse pressure line");
        errors.add(ErrorSource::ProcHost);
    }
    (psi.some, psi.full)
}

/// One PSI file (`/proc/pressure/cpu`, `io`, `memory`), parsed.
#[derive(Debug, Default, PartialEq)]
pub struct PsiAvg10<'a> {
    /// avg10 of the `some` line, as a ratio.
    pub some: Option<f64>,
    /// avg10 of the `full` line, as a ratio.
    pub full: Option<f64>,
    /// Non-empty lines that do not parse.
    pub bad_lines: Vec<&'a str>,
}

/// Parses the text of a PSI file; lines that do not parse are returned, not
/// fatal. A line is `some ` or `full ` and `avg10=`, `avg60=`, `avg300=`
/// percentages (0 to 100) and a `total=`.
pub fn parse_pressure(text: &str) -> PsiAvg10<'_> {
    let mut psi = PsiAvg10::default();
    for line in text.lines().map(str::trim).filter(|l| !l.is_empty()) {
        // procfs slices off the first 5 bytes unchecked: checking them here
        // keeps a line like "some\u{7de}..." from panicking mid-character.
        let slot = match line.get(..5) {
            Some("some ") => &mut psi.some,
            Some("full ") => &mut psi.full,
            _ => {
                psi.bad_lines.push(line);
                continue;
            }
        };
        match procfs::parse_pressure_record(line) {
            Ok(r) if (0.0..=100.0).contains(&r.avg10) => *slot = Some(percent_to_ratio(r.avg10)),
            _ => psi.bad_lines.push(line),
        }
    }
    psi
}

fn psi_unavailable(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::NotFound
        || e.kind() == io::ErrorKind::Unsupported
        || e.raw_os_error() == Some(EOPNOTSUPP)
}

/// The kernel prints avg10 as a percent with two decimals; round away the
/// `f32` noise so 2.10 becomes 0.021, not 0.020999999.
fn percent_to_ratio(percent: f32) -> f64 {
    (f64::from(percent) * 100.0).round() / 10_000.0
}
