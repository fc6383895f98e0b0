//! Real drivers' latencies: on by default, off by the scenario's `latencies` or
//! by `STALLWATCH_FAKE_NVML_LATENCIES` (which wins when set); a fault's delay
//! adds on top; the sleeps do not hold the library, so calls on different GPUs
//! overlap.

mod common;

use std::thread;
use std::time::{Duration, Instant};

use common::{ScenarioFile, init, ms};
use nvml_wrapper::enum_wrappers::device::PcieUtilCounter;
use nvml_wrapper::structs::device::FieldId;
use serde_json::{Value, json};

const LATENCY_VAR: &str = "STALLWATCH_FAKE_NVML_LATENCIES";
const GPUS: usize = 4;

fn timed<T>(f: impl FnOnce() -> T) -> (T, Duration) {
    let start = Instant::now();
    let out = f();
    (out, start.elapsed())
}

fn scenario(extra: Value) -> Value {
    let gpus: Vec<Value> = (0..GPUS)
        .map(|i| json!({"pcie_tx_kbps": 100 * (i + 1), "power_mw": 100_000}))
        .collect();
    let mut s = json!({ "gpus": gpus });
    for (k, v) in extra.as_object().unwrap() {
        s[k] = v.clone();
    }
    s
}

fn set_var(value: Option<&str>) {
    // SAFETY: this binary runs a single test, and no other thread of it runs now.
    unsafe {
        match value {
            Some(v) => std::env::set_var(LATENCY_VAR, v),
            None => std::env::remove_var(LATENCY_VAR),
        }
    }
}

#[test]
fn latencies_are_modelled_and_switch_off() {
    set_var(None);
    let file = ScenarioFile::new("latency");
    file.write(&scenario(json!({})));

    // On by default: init, a handle by index, PCIe throughput, power, field values.
    let (nvml, took) = timed(init);
    assert!(took >= ms(4), "init took {took:?}");
    let (d0, took) = timed(|| nvml.device_by_index(0).unwrap());
    assert!(took >= ms(6), "a handle by index took {took:?}");
    let (tx, took) = timed(|| d0.pcie_throughput(PcieUtilCounter::Send).unwrap());
    assert_eq!(tx, 100);
    assert!(took >= ms(18), "PCIe throughput took {took:?}");
    let (power, took) = timed(|| d0.power_usage().unwrap());
    assert_eq!(power, 100_000);
    assert!(took >= Duration::from_micros(3_300), "power took {took:?}");
    let (_, took) = timed(|| d0.field_values_for(&[FieldId(197)]).unwrap());
    assert!(
        took >= Duration::from_micros(300),
        "field 197 took {took:?}"
    );

    // Calls on different GPUs from different threads overlap: 4 GPUs x 5 reads
    // of 20 ms are 400 ms one after the other.
    let devices: Vec<_> = (0..GPUS)
        .map(|i| nvml.device_by_index(i as u32).unwrap())
        .collect();
    let (_, took) = timed(|| {
        thread::scope(|s| {
            for (i, d) in devices.iter().enumerate() {
                s.spawn(move || {
                    for _ in 0..5 {
                        let v = d.pcie_throughput(PcieUtilCounter::Send).unwrap();
                        assert_eq!(v, 100 * (i as u32 + 1));
                    }
                });
            }
        });
    });
    assert!(
        took >= ms(100),
        "each thread reads for 100 ms, took {took:?}"
    );
    assert!(took < ms(300), "the reads did not overlap: {took:?}");

    // A fault's delay adds on top.
    file.write(&scenario(json!({"faults": [
        {"call": "nvmlDeviceGetPcieThroughput", "gpu": 0, "delay_ms": 50}
    ]})));
    let (_, took) = timed(|| d0.pcie_throughput(PcieUtilCounter::Send).unwrap());
    assert!(
        took >= ms(70),
        "50 ms of fault and 20 of latency took {took:?}"
    );

    // Off in the scenario.
    file.write(&scenario(json!({"latencies": false})));
    d0.pcie_throughput(PcieUtilCounter::Send).unwrap(); // reloads the file
    let (tx, took) = timed(|| d0.pcie_throughput(PcieUtilCounter::Send).unwrap());
    assert_eq!(tx, 100);
    assert!(
        took < ms(5),
        "with latencies off, PCIe throughput took {took:?}"
    );
    let (_, took) = timed(|| nvml.device_by_index(1).unwrap());
    assert!(took < ms(5), "with latencies off, a handle took {took:?}");

    // The variable wins when set: 1 turns them on against the scenario ...
    set_var(Some("1"));
    let (_, took) = timed(|| d0.pcie_throughput(PcieUtilCounter::Send).unwrap());
    assert!(
        took >= ms(18),
        "with {LATENCY_VAR}=1 PCIe throughput took {took:?}"
    );
    // ... and 0 off against the scenario's default.
    file.write(&scenario(json!({})));
    set_var(Some("0"));
    d0.pcie_throughput(PcieUtilCounter::Send).unwrap();
    let (_, took) = timed(|| d0.pcie_throughput(PcieUtilCounter::Send).unwrap());
    assert!(
        took < ms(5),
        "with {LATENCY_VAR}=0 PCIe throughput took {took:?}"
    );
    // Empty: the scenario decides again.
    set_var(Some(""));
    let (_, took) = timed(|| d0.pcie_throughput(PcieUtilCounter::Send).unwrap());
    assert!(
        took >= ms(18),
        "with {LATENCY_VAR} empty PCIe throughput took {took:?}"
    );
    set_var(None);
}
