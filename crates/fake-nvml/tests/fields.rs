//! Field values of power and PCIe traffic: instant power (186) and the
//! cumulative PCIe byte counters (197, 198), which grow at the scenario's
//! rates; the switches that make a GPU answer like an older driver.

mod common;

use std::thread::sleep;
use std::time::{Duration, Instant};

use common::{ScenarioFile, init, ms};
use nvml_wrapper::Device;
use nvml_wrapper::enum_wrappers::device::PcieUtilCounter;
use nvml_wrapper::enums::device::SampleValue;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::structs::device::FieldId;
use serde_json::{Value, json};

const IDS: [FieldId; 4] = [FieldId(186), FieldId(197), FieldId(198), FieldId(3)];

fn scenario(tx_kbps: u32, rx_kbps: u32) -> Value {
    json!({
        "latencies": false,
        "gpus": [
            {"power_mw": 250_500, "pcie_tx_kbps": tx_kbps, "pcie_rx_kbps": rx_kbps,
             "health": {"ecc_corrected": 3}},
            {"power_mw": 80_000, "pcie_tx_kbps": 5,
             "unsupported": ["power_instant_field", "pcie_counter_fields"]},
            {"unsupported": ["power", "pcie"]},
            {"lost": true}
        ]
    })
}

/// The four fields of `IDS`.
fn read(d: &Device) -> Vec<Result<SampleValue, NvmlError>> {
    d.field_values_for(&IDS)
        .unwrap()
        .into_iter()
        .map(|s| s.unwrap().value)
        .collect()
}

/// (TX, RX) counters, and the bounds of the moment they were taken.
fn counters(d: &Device) -> ((u64, u64), Instant, Instant) {
    let before = Instant::now();
    let v = read(d);
    let after = Instant::now();
    let (Ok(SampleValue::U64(tx)), Ok(SampleValue::U64(rx))) = (&v[1], &v[2]) else {
        panic!("fields 197 and 198 answer unsigned long longs: {v:?}");
    };
    ((*tx, *rx), before, after)
}

/// `delta` bytes grew at `kbps` over an interval between `min` and `max`.
fn grew(delta: u64, kbps: u64, min: Duration, max: Duration) {
    let low = (kbps * 1024 * min.as_micros() as u64 / 1_000_000).saturating_sub(1);
    let high = kbps * 1024 * max.as_micros() as u64 / 1_000_000 + 1;
    assert!(
        (low..=high).contains(&delta),
        "{delta} bytes at {kbps} KiB/s, expected {low}..={high}"
    );
}

#[test]
fn power_and_pcie_counter_fields() {
    let file = ScenarioFile::new("fields");
    file.write(&scenario(1000, 2000));
    let nvml = init();
    let d0 = nvml.device_by_index(0).unwrap();

    // Instant power in milliwatts as an unsigned int; health fields still answer.
    let v = read(&d0);
    assert!(matches!(v[0], Ok(SampleValue::U32(250_500))), "{v:?}");
    assert!(matches!(v[3], Ok(SampleValue::U64(3))), "{v:?}");

    // The counters grow at the configured rates between reads.
    let (c1, a1, b1) = counters(&d0);
    sleep(ms(300));
    let (c2, a2, b2) = counters(&d0);
    grew(c2.0 - c1.0, 1000, a2 - b1, b2 - a1);
    grew(c2.1 - c1.1, 2000, a2 - b1, b2 - a1);

    // A new rate changes the slope from the previous read on, not the whole counter.
    file.write(&scenario(4000, 0));
    sleep(ms(200));
    let (c3, a3, b3) = counters(&d0);
    grew(c3.0 - c2.0, 4000, a3 - b2, b3 - a2);
    assert_eq!(c3.1, c2.1, "RX at 0 KiB/s stays where it was");
    assert!(c3.0 > c2.0 && c2.0 > c1.0);

    // An older driver: the three fields answer NOT_SUPPORTED, the calls work.
    let d1 = nvml.device_by_index(1).unwrap();
    let v = read(&d1);
    for i in 0..3 {
        assert!(matches!(v[i], Err(NvmlError::NotSupported)), "{i}: {v:?}");
    }
    assert_eq!(d1.power_usage().unwrap(), 80_000);
    assert_eq!(d1.pcie_throughput(PcieUtilCounter::Send).unwrap(), 5);

    // No power or PCIe readings at all: not the fields either.
    let d2 = nvml.device_by_index(2).unwrap();
    let v = read(&d2);
    for i in 0..3 {
        assert!(matches!(v[i], Err(NvmlError::NotSupported)), "{i}: {v:?}");
    }

    // A lost GPU answers as its other calls do: take its handle while it is
    // there, then lose it.
    let mut found = scenario(1000, 2000);
    found["gpus"][3]["lost"] = json!(false);
    file.write(&found);
    let d3 = nvml.device_by_index(3).unwrap();
    assert!(read(&d3)[1].is_ok());
    file.write(&scenario(1000, 2000));
    assert!(matches!(d3.field_values_for(&IDS), Err(NvmlError::GpuLost)));
}
