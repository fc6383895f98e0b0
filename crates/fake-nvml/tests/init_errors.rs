//! Init fails without a usable scenario, or with the scenario's `init_error`;
//! the library is ref-counted and refuses calls before init.

mod common;

use common::{ENV_VAR, ScenarioFile, init, try_init};
use nvml_wrapper::error::NvmlError;
use serde_json::json;

#[test]
fn init_answers_scenario_problems() {
    // No variable.
    // SAFETY: this binary runs a single test; nothing else reads the environment now.
    unsafe { std::env::remove_var(ENV_VAR) };
    assert!(matches!(try_init(), Err(NvmlError::Unknown)));

    // Variable set, file missing, then invalid JSON, then an unknown field.
    let file = ScenarioFile::new("init-errors");
    assert!(matches!(try_init(), Err(NvmlError::Unknown)));
    file.write_text("{ not json");
    assert!(matches!(try_init(), Err(NvmlError::Unknown)));
    file.write(&json!({"gpus": [{"utilisation_gpu": 3}]}));
    assert!(matches!(try_init(), Err(NvmlError::Unknown)));

    // init_error by name and by number.
    file.write(&json!({"init_error": "driver_not_loaded"}));
    assert!(matches!(try_init(), Err(NvmlError::DriverNotLoaded)));
    file.write(&json!({"init_error": "no_permission"}));
    assert!(matches!(try_init(), Err(NvmlError::NoPermission)));
    file.write(&json!({"init_error": 999}));
    assert!(matches!(try_init(), Err(NvmlError::Unknown)));

    // A fault on nvmlInit matches every init variant.
    file.write(&json!({"faults": [{"call": "nvmlInit", "error": "driver_not_loaded"}]}));
    assert!(matches!(try_init(), Err(NvmlError::DriverNotLoaded)));

    // A good file: init works, zero GPUs by default.
    file.write(&json!({}));
    let nvml = init();
    assert_eq!(nvml.device_count().unwrap(), 0);
    assert_eq!(nvml.sys_driver_version().unwrap(), "550.54.15");

    // Ref-counted: a second handle on the library, dropped, leaves the first working.
    let second = init();
    drop(second);
    assert_eq!(nvml.device_count().unwrap(), 0);

    // Shutting the last one down makes raw calls answer UNINITIALIZED (1).
    let lib = nvml.lib();
    // SAFETY: plain calls into the loaded library with valid out-pointers.
    unsafe {
        assert_eq!(lib.nvmlShutdown(), 0);
        let mut count = 0u32;
        assert_eq!(lib.nvmlDeviceGetCount_v2(&mut count), 1);
        assert_eq!(lib.nvmlShutdown(), 1);
        assert_eq!(lib.nvmlInit_v2(), 0);
        assert_eq!(lib.nvmlDeviceGetCount_v2(&mut count), 0);
    }
}
