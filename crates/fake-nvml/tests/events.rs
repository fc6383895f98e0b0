//! Scripted Xids through nvml-wrapper's event calls, the kernel-log lines the
//! library writes for them, and the health counters through field values.

mod common;

use std::time::Instant;

use common::{ScenarioFile, init, ms};
use nvml_wrapper::bitmasks::event::EventTypes;
use nvml_wrapper::enum_wrappers::device::{EccCounter, MemoryError, RetirementCause};
use nvml_wrapper::enum_wrappers::nv_link::ErrorCounter;
use nvml_wrapper::enums::device::SampleValue;
use nvml_wrapper::enums::event::XidError;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::structs::device::FieldId;
use serde_json::json;

#[test]
fn xids_arrive_as_events_and_kernel_log_lines() {
    let file = ScenarioFile::new("events");
    let log = file.path().with_file_name("kmsg");
    let scenario = |xids: serde_json::Value, lost: bool| {
        json!({
            "kernel_log": log,
            "gpus": [
                {"xids": xids, "health": {"ecc_uncorrected": 2, "row_remap_failure": true, "retired_pages_double_bit": 3,
                                          "nvlink_replay_errors": 9, "recovery_action": 1}},
                {"lost": lost, "unsupported": ["events"]}
            ]
        })
    };
    file.write(&scenario(json!([]), false));
    let nvml = init();
    let d0 = nvml.device_by_index(0).unwrap();
    let d1 = nvml.device_by_index(1).unwrap();
    assert!(
        d0.supported_event_types()
            .unwrap()
            .contains(EventTypes::CRITICAL_XID_ERROR)
    );
    assert!(matches!(
        d1.supported_event_types(),
        Err(NvmlError::NotSupported)
    ));

    let set = d0
        .register_events(
            EventTypes::CRITICAL_XID_ERROR,
            nvml.create_event_set().unwrap(),
        )
        .unwrap();
    // Nothing due: the wait lasts its timeout.
    let start = Instant::now();
    assert!(matches!(set.wait(200), Err(NvmlError::Timeout)));
    assert!(start.elapsed() >= ms(190), "{:?}", start.elapsed());

    // One Xid now, one in 300 ms, one only in the kernel log.
    file.write(&scenario(
        json!([
            {"xid": 48, "pid": 4242, "name": "train.py"},
            {"xid": 48, "at_ms": 300},
            {"xid": 79, "nvml_event": false, "message": "GPU has fallen off the bus."}
        ]),
        false,
    ));
    let first = set.wait(1000).unwrap();
    assert_eq!(first.event_data, Some(XidError::Value(48)));
    assert_eq!(first.device.index().unwrap(), 0);
    let start = Instant::now();
    let second = set.wait(2000).unwrap();
    assert_eq!(second.event_data, Some(XidError::Value(48)));
    assert!(matches!(set.wait(100), Err(NvmlError::Timeout)));
    assert!(start.elapsed() >= ms(150), "the second came early");

    // Lines in the order their Xids came due.
    let text = std::fs::read_to_string(&log).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines,
        [
            "NVRM: Xid (PCI:0000:10:00): 48, pid=4242, name=train.py, scripted Xid",
            "NVRM: Xid (PCI:0000:10:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.",
            "NVRM: Xid (PCI:0000:10:00): 48, pid='<unknown>', name=<unknown>, scripted Xid"
        ]
    );

    // Field values from `health`; others not supported.
    let ids = [4, 145, 52, 230, 142, 1000].map(FieldId);
    let values = d0.field_values_for(&ids).unwrap();
    let got: Vec<Option<u64>> = values
        .into_iter()
        .map(|v| match v.ok()?.value.ok()? {
            SampleValue::U32(v) => Some(u64::from(v)),
            SampleValue::U64(v) => Some(v),
            _ => None,
        })
        .collect();
    assert_eq!(got, [Some(2), Some(1), Some(9), Some(1), Some(0), None]);

    // The dedicated calls answer from the same counters.
    assert_eq!(
        d0.total_ecc_errors(MemoryError::Uncorrected, EccCounter::Volatile)
            .unwrap(),
        2
    );
    let pages = d0
        .retired_pages(RetirementCause::DoubleBitEccError)
        .unwrap();
    assert_eq!(pages.len(), 3);
    assert!(pages.windows(2).all(|w| w[0].address < w[1].address));
    assert!(
        d0.retired_pages(RetirementCause::MultipleSingleBitEccErrors)
            .unwrap()
            .is_empty()
    );
    assert!(!d0.are_pages_pending_retired().unwrap());
    assert_eq!(
        d0.link_wrapper_for(0)
            .error_counter(ErrorCounter::DlReplay)
            .unwrap(),
        9
    );
    assert_eq!(
        d0.link_wrapper_for(1)
            .error_counter(ErrorCounter::DlReplay)
            .unwrap(),
        0
    );
    assert!(matches!(
        d1.retired_pages(RetirementCause::DoubleBitEccError),
        Err(NvmlError::NotSupported)
    ));

    // A lost GPU fails the wait at once; freeing the set works.
    let set1 = d1.register_events(
        EventTypes::CRITICAL_XID_ERROR,
        nvml.create_event_set().unwrap(),
    );
    assert!(set1.is_err(), "GPU 1 does not support events");
    file.write(&json!({"gpus": [{"lost": true}, {}]}));
    let start = Instant::now();
    assert!(matches!(set.wait(5000), Err(NvmlError::GpuLost)));
    assert!(start.elapsed() < ms(1000));
    set.release_events().unwrap();
}
