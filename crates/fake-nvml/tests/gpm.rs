//! GPM through nvml-wrapper: support, samples, metrics between two samples,
//! and the refusals (too close together, unsupported device, foreign handles).

mod common;

use std::thread::sleep;
use std::time::Duration;

use common::{ScenarioFile, init};
use nvml_wrapper::enums::gpm::GpmMetricId;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::gpm::gpm_metrics_get;
use serde_json::json;

#[test]
fn gpm_samples_and_metrics() {
    let file = ScenarioFile::new("gpm");
    let spinning = json!({
        "sm_util": 3.0, "sm_occupancy": 1.5, "any_tensor_util": 0.0, "dram_bw_util": 0.5,
        "nvlink_tx_mibps": 0.0, "nvlink_rx_mibps": 0.0
    });
    file.write(&json!({"gpus": [{"gpm": spinning}, {}]}));
    let nvml = init();
    let d0 = nvml.device_by_index(0).unwrap();
    let d1 = nvml.device_by_index(1).unwrap();
    assert!(d0.gpm_support().unwrap());
    assert!(!d1.gpm_support().unwrap());
    assert!(matches!(d1.gpm_sample(), Err(NvmlError::NotSupported)));

    let ids = [
        GpmMetricId::SmUtil,
        GpmMetricId::SmOccupancy,
        GpmMetricId::AnyTensorUtil,
        GpmMetricId::DramBwUtil,
        GpmMetricId::NvlinkTotalTxPerSec,
        GpmMetricId::NvlinkTotalRxPerSec,
        GpmMetricId::Fp64Util,
    ];
    let first = d0.gpm_sample().unwrap();
    // Two samples under 100 ms apart are refused.
    let close = d0.gpm_sample().unwrap();
    assert!(matches!(
        gpm_metrics_get(&nvml, &first, &close, &ids),
        Err(NvmlError::InvalidArg)
    ));
    drop(close);

    // The metrics are the later sample's values, in NVML's units.
    file.write(&json!({"gpus": [{"gpm": {
        "sm_util": 85.0, "sm_occupancy": 40.0, "any_tensor_util": 60.0, "dram_bw_util": 30.0,
        "nvlink_tx_mibps": 1000.0, "nvlink_rx_mibps": 2000.0
    }}, {}]}));
    sleep(Duration::from_millis(150));
    let second = d0.gpm_sample().unwrap();
    let got = gpm_metrics_get(&nvml, &first, &second, &ids).unwrap();
    let values: Vec<Option<f64>> = got
        .iter()
        .map(|r| r.as_ref().ok().map(|m| m.value))
        .collect();
    assert_eq!(
        values,
        [
            Some(85.0),
            Some(40.0),
            Some(60.0),
            Some(30.0),
            Some(1000.0),
            Some(2000.0),
            None
        ]
    );
    assert!(matches!(got[6], Err(NvmlError::NotSupported)));
    assert_eq!(got[0].as_ref().unwrap().metric_info.short_name, "SM_UTIL");
    assert_eq!(got[4].as_ref().unwrap().metric_info.unit, "MiB/sec");

    // An injected fault reaches the caller; the samples stay usable.
    file.write(&json!({
        "gpus": [{"gpm": spinning}, {}],
        "faults": [{"call": "nvmlGpmMetricsGet", "error": "unknown"}]
    }));
    assert!(matches!(
        gpm_metrics_get(&nvml, &first, &second, &ids),
        Err(NvmlError::Unknown)
    ));
    file.write(&json!({"gpus": [{"gpm": spinning}, {}]}));
    assert!(gpm_metrics_get(&nvml, &first, &second, &ids).is_ok());

    // No MIG in the stand-in: MIG samples are not supported.
    assert!(matches!(d0.gpm_mig_sample(1), Err(NvmlError::NotSupported)));

    // Freed handles are refused.
    let raw = second.into_handle();
    let sym = nvml.lib().nvmlGpmSampleFree.as_ref().unwrap();
    assert_eq!(unsafe { sym(raw) }, 0);
    assert_eq!(unsafe { sym(raw) }, 2, "a second free is INVALID_ARGUMENT");
    first.free().unwrap();
}
