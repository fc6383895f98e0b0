//! Times the short history behind `/api/v1/history` and the status page at its
//! documented bound, 8 GPUs with a full ring of 900 points each: what the
//! sampler pays per sample to record (8 jobs of 3 top threads each, one per
//! GPU), and what a request pays to serialize all 15 minutes. Prints the body
//! size, raw and gzip-compressed at the fastest level (as the server sends it).
//!
//! Plain `Instant` timing (no criterion): a warm-up, then every iteration is
//! timed on its own; mean, p50, p99 and max are printed in microseconds.
//!
//! Run with `cargo bench -p stallwatch --bench history`. Any argument that is a
//! number sets the iteration count (default 2000).

use collector::snapshot::{GpuSnapshot, JobSnapshot, Snapshot, ThreadUsage};
use stallwatch::sampling::history::{CAPACITY, History, POINT_BYTES};
use std::hint::black_box;
use std::io::Write;

mod timing;
use timing::{measure, report};

const GPUS: u32 = 8;

fn snapshot(t: f64) -> Snapshot {
    let wobble = (t * 0.37).sin().abs();
    Snapshot {
        timestamp_seconds: t,
        nvml_up: true,
        gpus: (0..GPUS)
            .map(|i| GpuSnapshot {
                index: i,
                uuid: format!("GPU-4f1c2a3b-0000-4000-8000-00000000000{i}"),
                up: true,
                utilization_ratio: Some(0.9 * wobble),
                ..GpuSnapshot::default()
            })
            .collect(),
        jobs: (0..GPUS)
            .map(|i| JobSnapshot {
                pid: 1000 + i,
                comm: "python3".to_owned(),
                gpus: vec![i],
                processes: 9,
                cpu_cores: Some(1.2),
                top_threads: ["pt_data_worker", "python3", "pin_memory"]
                    .iter()
                    .enumerate()
                    .map(|(k, name)| ThreadUsage {
                        pid: 1000 + i,
                        tid: 2000 + i * 10 + k as u32,
                        name: (*name).to_owned(),
                        state: 'R',
                        cpu_ratio: wobble / (k as f64 + 1.0),
                        wait_ratio: Some(0.01),
                    })
                    .collect(),
                ..JobSnapshot::default()
            })
            .collect(),
        ..Snapshot::default()
    }
}

fn main() {
    let iterations = std::env::args()
        .skip(1)
        .find_map(|a| a.parse::<usize>().ok())
        .unwrap_or(2000);
    let warmup = (iterations / 10).max(100);

    let start = 1_795_974_000.0;
    let mut history = History::default();
    for i in 0..CAPACITY {
        history.record(&snapshot(start + i as f64));
    }
    // Snapshots for the timed records, made beforehand (the sampler has its
    // snapshot already); each one second after the last.
    let t = start + CAPACITY as f64;
    let snapshots: Vec<Snapshot> = (0..warmup + iterations)
        .map(|i| snapshot(t + i as f64))
        .collect();
    let mut next = snapshots.iter();

    let body = serde_json::to_vec(&history.window(900.0).expect("recorded")).expect("encodes");
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gz.write_all(&body).expect("compresses");
    let compressed = gz.finish().expect("compresses").len();
    println!(
        "shape: {GPUS} GPUs x {CAPACITY} points of {POINT_BYTES} bytes = {} bytes of points; \
         {iterations} timed iterations after {warmup} warm-up",
        GPUS as usize * CAPACITY * POINT_BYTES
    );
    println!(
        "output: /api/v1/history?minutes=15 {} bytes, {compressed} bytes gzip (fastest)",
        body.len()
    );

    let stats = measure(warmup, iterations, || {
        if let Some(s) = next.next() {
            history.record(black_box(s));
        }
    });
    report("record one sample (8 GPUs)", &stats);

    let stats = measure(warmup, iterations, || {
        let w = history.window(900.0).expect("recorded");
        black_box(serde_json::to_vec(black_box(&w)).expect("encodes"));
    });
    report("serialize 15 min (8 x 900 points)", &stats);
}
