//! The scenario file is re-read when it changes; a broken rewrite keeps the last
//! good state; the energy counter never goes backwards across reloads.

mod common;

use std::thread::sleep;

use common::{ScenarioFile, init, ms};
use nvml_wrapper::error::NvmlError;
use serde_json::json;

#[test]
fn changes_to_the_file_take_effect() {
    let file = ScenarioFile::new("reload");
    file.write(
        &json!({"gpus": [{"utilization_gpu": 10, "power_mw": 100_000, "energy_mj": 5_000}]}),
    );
    let nvml = init();
    let d = nvml.device_by_index(0).unwrap();
    assert_eq!(d.utilization_rates().unwrap().gpu, 10);
    sleep(ms(100));
    let e1 = d.total_energy_consumption().unwrap();
    assert!(e1 >= 5_000 + 9_000, "energy {e1} after ~100 ms at 100 W");

    // New values, same energy base and no power: the counter carries over, flat.
    file.write(&json!({"gpus": [{"utilization_gpu": 99, "power_mw": 0, "energy_mj": 5_000}, {}]}));
    assert_eq!(d.utilization_rates().unwrap().gpu, 99);
    assert_eq!(nvml.device_count().unwrap(), 2);
    let e2 = d.total_energy_consumption().unwrap();
    assert!(e2 >= e1, "energy went backwards: {e1} -> {e2}");
    sleep(ms(50));
    assert_eq!(d.total_energy_consumption().unwrap(), e2);

    // A broken rewrite: the last good scenario stays in use.
    file.write_text("{\"gpus\": [");
    assert_eq!(d.utilization_rates().unwrap().gpu, 99);
    assert_eq!(nvml.device_count().unwrap(), 2);
    file.write(&json!({"gpus": [{"bogus_field": 1}]}));
    assert_eq!(d.utilization_rates().unwrap().gpu, 99);

    // Fixed again; a higher energy base raises the counter.
    file.write(&json!({"gpus": [{"utilization_gpu": 1, "power_mw": 0, "energy_mj": 9_000_000}]}));
    assert_eq!(d.utilization_rates().unwrap().gpu, 1);
    assert_eq!(d.total_energy_consumption().unwrap(), 9_000_000);
    assert_eq!(nvml.device_count().unwrap(), 1);

    // A GPU that falls off the bus: the handle held from before answers GpuLost.
    file.write(&json!({"gpus": [{"lost": true}]}));
    assert!(matches!(d.utilization_rates(), Err(NvmlError::GpuLost)));
    assert!(matches!(d.name(), Err(NvmlError::GpuLost)));
    assert!(matches!(d.memory_info(), Err(NvmlError::GpuLost)));

    // A GPU removed from the scenario: the old handle is no longer valid.
    file.write(&json!({"gpus": []}));
    assert!(matches!(d.utilization_rates(), Err(NvmlError::InvalidArg)));
}
