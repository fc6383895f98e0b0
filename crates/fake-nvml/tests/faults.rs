//! Injected faults: error answers, delays, and a hang that ends when the fault is removed.

mod common;

use std::thread;
use std::time::Instant;

use common::{ScenarioFile, init, ms};
use nvml_wrapper::error::NvmlError;
use serde_json::{Value, json};

fn scenario(faults: Value) -> Value {
    json!({
        "gpus": [{"utilization_gpu": 50}, {"utilization_gpu": 60}],
        "faults": faults
    })
}

#[test]
fn faults_delay_and_fail_calls() {
    let file = ScenarioFile::new("faults");
    file.write(&scenario(json!([
        {"call": "nvmlDeviceGetUtilizationRates", "gpu": 0, "error": "unknown"},
        {"call": "nvmlDeviceGetPowerUsage", "error": 15},
        {"call": "nvmlDeviceGetMemoryInfo", "gpu": 1, "error": "no_permission"}
    ])));
    let nvml = init();
    let d0 = nvml.device_by_index(0).unwrap();
    let d1 = nvml.device_by_index(1).unwrap();

    // Errors, per GPU or for all; a fault without "_v2" matches the _v2 symbol too.
    assert!(matches!(d0.utilization_rates(), Err(NvmlError::Unknown)));
    assert_eq!(d1.utilization_rates().unwrap().gpu, 60);
    assert!(matches!(d0.power_usage(), Err(NvmlError::GpuLost)));
    assert!(matches!(d1.power_usage(), Err(NvmlError::GpuLost)));
    assert!(d0.memory_info().is_ok());
    assert!(matches!(d1.memory_info(), Err(NvmlError::NoPermission)));

    // A delay-only fault answers normally, late.
    file.write(&scenario(json!([
        {"call": "nvmlDeviceGetUtilizationRates", "gpu": 0, "delay_ms": 300}
    ])));
    let start = Instant::now();
    assert_eq!(d0.utilization_rates().unwrap().gpu, 50);
    let took = start.elapsed();
    assert!(took >= ms(300), "delayed call returned after {took:?}");
    let start = Instant::now();
    assert_eq!(d1.utilization_rates().unwrap().gpu, 60);
    assert!(start.elapsed() < ms(250), "GPU 1 was delayed too");

    // Delay then error.
    file.write(&scenario(json!([
        {"call": "nvmlDeviceGetTemperature", "delay_ms": 150, "error": "timeout"}
    ])));
    let start = Instant::now();
    let temp = d1.temperature(nvml_wrapper::enum_wrappers::device::TemperatureSensor::Gpu);
    assert!(matches!(temp, Err(NvmlError::Timeout)));
    assert!(start.elapsed() >= ms(150));

    // A 30 s hang ends soon after the fault is removed from the file.
    file.write(&scenario(json!([
        {"call": "nvmlDeviceGetUtilizationRates", "gpu": 0, "delay_ms": 30_000, "error": "unknown"}
    ])));
    let start = Instant::now();
    thread::scope(|s| {
        let hung = s.spawn(|| d0.utilization_rates().map(|u| u.gpu));
        thread::sleep(ms(400));
        assert!(!hung.is_finished(), "the call should still hang");
        // Other calls proceed meanwhile.
        assert_eq!(d1.utilization_rates().unwrap().gpu, 60);
        file.write(&scenario(json!([])));
        // With the fault gone the call answers normally.
        assert_eq!(hung.join().unwrap().unwrap(), 50);
    });
    let took = start.elapsed();
    assert!(
        took < ms(3000),
        "hang lasted {took:?} after the fault was removed"
    );
}
