//! `ProcReader::read_host` against the checked-in `fixtures/proc_host` tree
//! (2 cores, real-format meminfo, PSI) and variants of it in a temp dir.

use std::fs;
use std::path::{Path, PathBuf};

use collector::proc::ProcReader;
use collector::sample::{CpuTimes, ErrorCounts, ErrorSource, HostMemory, Pressure};
use tempfile::TempDir;

const TICKS: u64 = 100;
const PAGE: u64 = 4096;

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/proc_host")
}

/// A copy of the fixture's `stat` and `meminfo`, without `pressure/`.
fn copy_without_pressure() -> TempDir {
    let dir = TempDir::new().unwrap();
    for name in ["stat", "meminfo"] {
        fs::copy(fixture().join(name), dir.path().join(name)).unwrap();
    }
    dir
}

#[test]
fn cpu_times_cores_and_online_cpus() {
    let reader = ProcReader::with_units(fixture(), TICKS, PAGE).unwrap();
    assert_eq!(reader.boot_time_seconds(), 1_700_000_000);
    let mut errors = ErrorCounts::default();
    let host = reader.read_host(&mut errors);

    // busy = user + nice + system + irq + softirq + steal; total adds idle + iowait.
    let cpu = host.cpu.unwrap();
    assert_close(cpu.busy_seconds, 4.30);
    assert_close(cpu.total_seconds, 24.00);
    assert_close(cpu.steal_seconds.unwrap(), 0.10);
    assert_eq!(host.cores.len(), 2);
    assert_close(host.cores[0].steal_seconds.unwrap(), 0.10);
    assert_close(host.cores[1].steal_seconds.unwrap(), 0.0);
    assert_times(host.cores[0], 1.70, 12.20);
    assert_times(host.cores[1], 2.60, 11.80);
    assert_eq!(host.online_cpus, Some(2));
    assert_eq!(errors, ErrorCounts::default());
}

#[test]
fn memory_in_bytes() {
    let reader = ProcReader::with_units(fixture(), TICKS, PAGE).unwrap();
    let mut errors = ErrorCounts::default();
    let memory = reader.read_host(&mut errors).memory.unwrap();
    assert_eq!(
        memory,
        HostMemory {
            total_bytes: 65_536_000 * 1024,
            available_bytes: 32_768_000 * 1024,
            swap_total_bytes: 8_388_604 * 1024,
            swap_free_bytes: 8_000_000 * 1024,
        }
    );
    assert_eq!(errors, ErrorCounts::default());
}

#[test]
fn pressure_avg10_as_ratios() {
    let reader = ProcReader::with_units(fixture(), TICKS, PAGE).unwrap();
    let mut errors = ErrorCounts::default();
    let pressure = reader.read_host(&mut errors).pressure;
    assert_eq!(
        pressure,
        Pressure {
            cpu_some: Some(0.125),
            cpu_full: Some(0.0),
            io_some: Some(0.021),
            io_full: Some(0.0105),
            memory_some: Some(0.0),
            memory_full: Some(0.0),
        }
    );
    assert_eq!(errors, ErrorCounts::default());
}

#[test]
fn pressure_absent_is_not_an_error() {
    let dir = copy_without_pressure();
    let reader = ProcReader::with_units(dir.path(), TICKS, PAGE).unwrap();
    let mut errors = ErrorCounts::default();
    let host = reader.read_host(&mut errors);
    assert_eq!(host.pressure, Pressure::default());
    assert!(host.cpu.is_some() && host.memory.is_some());
    assert_eq!(errors, ErrorCounts::default());
}

#[test]
fn cpu_without_full_line_leaves_only_full_out() {
    let dir = copy_without_pressure();
    let pressure = dir.path().join("pressure");
    fs::create_dir(&pressure).unwrap();
    fs::write(
        pressure.join("cpu"),
        "some avg10=3.00 avg60=2.00 avg300=1.00 total=99\n",
    )
    .unwrap();
    let reader = ProcReader::with_units(dir.path(), TICKS, PAGE).unwrap();
    let mut errors = ErrorCounts::default();
    let p = reader.read_host(&mut errors).pressure;
    assert_eq!((p.cpu_some, p.cpu_full), (Some(0.03), None));
    assert_eq!((p.io_some, p.memory_full), (None, None));
    assert_eq!(errors, ErrorCounts::default());
}

#[test]
fn unreadable_or_malformed_host_files_are_counted() {
    let dir = copy_without_pressure();
    let pressure = dir.path().join("pressure");
    fs::create_dir_all(pressure.join("io")).unwrap(); // a directory: read fails
    fs::write(pressure.join("cpu"), "some avg10=oops\nfull\n").unwrap();
    fs::write(dir.path().join("meminfo"), "MemTotal: lots\n").unwrap();
    let reader = ProcReader::with_units(dir.path(), TICKS, PAGE).unwrap();
    let mut errors = ErrorCounts::default();
    let host = reader.read_host(&mut errors);
    assert_eq!(host.memory, None);
    assert_eq!(host.pressure, Pressure::default());
    assert!(host.cpu.is_some(), "stat is still read");
    // meminfo, pressure/io, and both lines of pressure/cpu.
    assert_eq!(errors.get(ErrorSource::ProcHost), 4);
    assert_eq!(errors.get(ErrorSource::ProcJob), 0);
}

#[test]
fn missing_or_broken_stat_fails_construction() {
    let dir = TempDir::new().unwrap();
    assert!(ProcReader::with_units(dir.path(), TICKS, PAGE).is_err());
    fs::write(dir.path().join("stat"), "cpu  1 2 3 4\n").unwrap();
    let err = ProcReader::with_units(dir.path(), TICKS, PAGE).unwrap_err();
    assert!(err.to_string().contains("stat"), "{err}");
}

fn assert_times(t: CpuTimes, busy: f64, total: f64) {
    assert_close(t.busy_seconds, busy);
    assert_close(t.total_seconds, total);
}

fn assert_close(actual: f64, expected: f64) {
    assert!((actual - expected).abs() < 1e-9, "{actual} != {expected}");
}
