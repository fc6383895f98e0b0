use collector::snapshot::{GpuSnapshot, JobSnapshot, Snapshot, ThreadUsage};
use serde_json::{Value, json};

use super::*;

fn gpu(index: u32, utilization: f64) -> GpuSnapshot {
    GpuSnapshot {
        index,
        uuid: format!("GPU-{index}"),
        up: true,
        utilization_ratio: Some(utilization),
        ..GpuSnapshot::default()
    }
}

fn thread(name: &str, cpu_ratio: f64) -> ThreadUsage {
    ThreadUsage {
        pid: 1,
        tid: 2,
        name: name.to_owned(),
        state: 'R',
        cpu_ratio,
        wait_ratio: None,
    }
}

fn job(gpus: &[u32], top_threads: Vec<ThreadUsage>) -> JobSnapshot {
    JobSnapshot {
        pid: 1,
        comm: "python3".to_owned(),
        gpus: gpus.to_vec(),
        top_threads,
        ..JobSnapshot::default()
    }
}

fn snapshot(t: f64, gpus: Vec<GpuSnapshot>, jobs: Vec<JobSnapshot>) -> Snapshot {
    Snapshot {
        timestamp_seconds: t,
        nvml_up: true,
        gpus,
        jobs,
        ..Snapshot::default()
    }
}

fn json_of(h: &History, seconds: f64) -> Value {
    serde_json::to_value(h.window(seconds).expect("a sample was recorded")).unwrap()
}

#[test]
fn a_point_is_32_bytes() {
    assert_eq!(POINT_BYTES, 32);
}

#[test]
fn records_utilization_and_the_busiest_thread_of_the_jobs_on_each_gpu() {
    let mut h = History::default();
    let jobs = vec![
        job(&[0], vec![thread("loader", 0.4)]),
        job(&[0, 1], vec![thread("spinner", 0.995_4), thread("x", 0.1)]),
        job(&[3], vec![thread("elsewhere", 1.0)]),
    ];
    h.record(&snapshot(
        100.0,
        vec![gpu(0, 0.02), gpu(1, 0.9), gpu(2, 0.5)],
        jobs,
    ));
    let v = json_of(&h, 900.0);
    assert_eq!(
        v,
        json!({
            "time": 100.0,
            "resolution_seconds": 1.0,
            "gpus": [
                {"gpu": 0, "uuid": "GPU-0", "t": [100.0], "utilization": [0.02], "thread_cpu": [0.995], "thread": ["spinner"]},
                {"gpu": 1, "uuid": "GPU-1", "t": [100.0], "utilization": [0.9], "thread_cpu": [0.995], "thread": ["spinner"]},
                {"gpu": 2, "uuid": "GPU-2", "t": [100.0], "utilization": [0.5], "thread_cpu": [null], "thread": [null]},
            ]
        })
    );
}

#[test]
fn unknown_utilization_is_null_when_nvml_is_stale_or_the_gpu_lost() {
    let mut h = History::default();
    let mut lost = gpu(1, 0.5);
    lost.up = false;
    h.record(&snapshot(100.0, vec![gpu(0, 0.5), lost], vec![]));
    let mut stale = snapshot(101.0, vec![gpu(0, 0.5), gpu(1, 0.5)], vec![]);
    stale.gpu_stale = true;
    h.record(&stale);
    let v = json_of(&h, 900.0);
    assert_eq!(v["gpus"][0]["utilization"], json!([0.5, null]));
    assert_eq!(v["gpus"][1]["utilization"], json!([null, null]));
}

#[test]
fn one_point_a_second_when_sampling_faster() {
    let mut h = History::default();
    for i in 0..40 {
        h.record(&snapshot(
            1000.1 + f64::from(i) * 0.25,
            vec![gpu(0, 0.5)],
            vec![],
        ));
    }
    let t = json_of(&h, 900.0)["gpus"][0]["t"].clone();
    assert_eq!(
        t,
        json!([
            1000.1, 1001.1, 1002.1, 1003.1, 1004.1, 1005.1, 1006.1, 1007.1, 1008.1, 1009.1
        ])
    );
}

#[test]
fn every_sample_at_a_one_second_interval_despite_jitter() {
    let mut h = History::default();
    let times = [1000.999, 1002.001, 1002.998, 1004.0, 1004.999, 1006.002];
    for t in times {
        h.record(&snapshot(t, vec![gpu(0, 0.5)], vec![]));
    }
    assert_eq!(json_of(&h, 900.0)["gpus"][0]["t"], json!(times));
}

#[test]
fn the_ring_keeps_the_last_900_points() {
    let mut h = History::default();
    for i in 0..1000 {
        h.record(&snapshot(
            f64::from(i),
            vec![gpu(0, 0.5), gpu(1, 0.5)],
            vec![],
        ));
    }
    for g in &h.gpus {
        assert_eq!(g.points.len(), CAPACITY);
        assert_eq!(g.points.capacity(), CAPACITY, "allocated once");
        assert_eq!(g.points.front().map(|p| p.t), Some(100.0));
    }
}

#[test]
fn the_window_holds_only_the_minutes_asked_for() {
    let mut h = History::default();
    for i in 0..300 {
        h.record(&snapshot(f64::from(i), vec![gpu(0, 0.5)], vec![]));
    }
    let t = json_of(&h, 60.0)["gpus"][0]["t"].as_array().unwrap().len();
    assert_eq!(t, 61, "299 back to 239");
}

#[test]
fn a_gpu_that_goes_away_is_dropped_and_a_new_uuid_starts_afresh() {
    let mut h = History::default();
    h.record(&snapshot(1.0, vec![gpu(0, 0.5), gpu(1, 0.5)], vec![]));
    h.record(&snapshot(2.0, vec![gpu(1, 0.5)], vec![]));
    let mut swapped = gpu(1, 0.7);
    swapped.uuid = "GPU-other".to_owned();
    h.record(&snapshot(3.0, vec![swapped], vec![]));
    let v = json_of(&h, 900.0);
    assert_eq!(v["gpus"].as_array().unwrap().len(), 1);
    assert_eq!(v["gpus"][0]["uuid"], "GPU-other");
    assert_eq!(v["gpus"][0]["t"], json!([3.0]));
}

#[test]
fn a_clock_that_goes_back_starts_afresh() {
    let mut h = History::default();
    h.record(&snapshot(500.0, vec![gpu(0, 0.5)], vec![]));
    h.record(&snapshot(501.0, vec![gpu(0, 0.5)], vec![]));
    h.record(&snapshot(200.0, vec![gpu(0, 0.5)], vec![]));
    assert_eq!(json_of(&h, 900.0)["gpus"][0]["t"], json!([200.0]));
}

#[test]
fn long_and_multibyte_thread_names_are_cut_at_a_character() {
    assert_eq!(
        ThreadName::new("pt_data_worker_12").as_str(),
        Some("pt_data_worker_")
    );
    assert_eq!(
        ThreadName::new("thread_loader_é").as_str(),
        Some("thread_loader_")
    );
    assert_eq!(ThreadName::new("").as_str(), None);
}

#[test]
fn nothing_to_show_before_the_first_sample() {
    assert!(History::default().window(900.0).is_none());
}
