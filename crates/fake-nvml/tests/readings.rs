//! Values from the scenario come back through nvml-wrapper unchanged.

mod common;

use std::thread::sleep;
use std::time::Instant;

use common::{ScenarioFile, init, ms};
use nvml_wrapper::bitmasks::device::ThrottleReasons;
use nvml_wrapper::enum_wrappers::device::{Clock, PcieUtilCounter, TemperatureSensor};
use nvml_wrapper::enums::device::UsedGpuMemory;
use nvml_wrapper::error::NvmlError;
use serde_json::json;

const GIB: u64 = 1 << 30;

#[test]
fn readings_match_the_scenario() {
    let file = ScenarioFile::new("readings");
    file.write(&json!({
        "driver_version": "550.54.15",
        "gpus": [
            {
                "uuid": "GPU-11111111-2222-3333-4444-555555555555",
                "name": "NVIDIA H100 80GB HBM3",
                "pci_bus_id": "00000000:17:00.0",
                "utilization_gpu": 87, "utilization_memory": 40,
                "memory_total_bytes": 80 * GIB, "memory_used_bytes": GIB,
                "temperature_c": 61,
                "power_mw": 350_000, "power_limit_mw": 700_000,
                "energy_mj": 1_000_000,
                "sm_clock_mhz": 1980, "memory_clock_mhz": 2619,
                "clock_event_reasons": 0x5,
                "pcie_tx_kbps": 1000, "pcie_rx_kbps": 2000,
                "fan_speed": 30,
                "processes": [
                    {"pid": 1234, "used_memory_bytes": GIB, "sm_util": 80, "mem_util": 30},
                    {"pid": 1235, "type": "compute"},
                    {"pid": 2000, "used_memory_bytes": 2 * GIB, "type": "graphics", "sm_util": 5}
                ]
            },
            {
                "unsupported": ["power", "energy", "temperature", "pcie", "clocks",
                                "clock_event_reasons", "fan_speed"],
                "processes": [{"pid": 42, "used_memory_bytes": 1024}]
            },
            {"lost": true}
        ]
    }));
    let nvml = init();

    assert_eq!(nvml.device_count().unwrap(), 3);
    assert_eq!(nvml.sys_driver_version().unwrap(), "550.54.15");
    assert_eq!(nvml.sys_nvml_version().unwrap(), "12.550.54.15");
    assert_eq!(nvml.sys_cuda_driver_version().unwrap(), 12040);

    // Identity.
    let d = nvml.device_by_index(0).unwrap();
    assert_eq!(d.index().unwrap(), 0);
    assert_eq!(d.name().unwrap(), "NVIDIA H100 80GB HBM3");
    assert_eq!(
        d.uuid().unwrap(),
        "GPU-11111111-2222-3333-4444-555555555555"
    );
    let pci = d.pci_info().unwrap();
    assert_eq!(
        (pci.bus_id.as_str(), pci.domain, pci.bus, pci.device),
        ("00000000:17:00.0", 0, 0x17, 0)
    );
    let by_uuid = nvml
        .device_by_uuid("GPU-11111111-2222-3333-4444-555555555555")
        .unwrap();
    assert_eq!(by_uuid.index().unwrap(), 0);
    assert_eq!(
        nvml.device_by_pci_bus_id("0000:17:00.0")
            .unwrap()
            .index()
            .unwrap(),
        0
    );
    assert!(matches!(
        nvml.device_by_uuid("GPU-nope"),
        Err(NvmlError::NotFound)
    ));
    assert!(matches!(
        nvml.device_by_index(3),
        Err(NvmlError::InvalidArg)
    ));
    let d1 = nvml.device_by_index(1).unwrap();
    assert_eq!(
        d1.uuid().unwrap(),
        "GPU-00000000-0000-4000-8000-000000000001"
    );
    assert_eq!(d1.pci_info().unwrap().bus_id, "00000000:11:00.0");

    // Readings.
    let u = d.utilization_rates().unwrap();
    assert_eq!((u.gpu, u.memory), (87, 40));
    let m = d.memory_info().unwrap();
    assert_eq!(
        (m.total, m.used, m.free, m.reserved),
        (80 * GIB, GIB, 79 * GIB, 0)
    );
    assert_eq!(m.version, 0x0200_0028);
    assert_eq!(d.temperature(TemperatureSensor::Gpu).unwrap(), 61);
    assert_eq!(d.power_usage().unwrap(), 350_000);
    assert_eq!(d.enforced_power_limit().unwrap(), 700_000);
    assert_eq!(d.power_management_limit().unwrap(), 700_000);
    assert_eq!(d.clock_info(Clock::SM).unwrap(), 1980);
    assert_eq!(d.clock_info(Clock::Graphics).unwrap(), 1980);
    assert_eq!(d.clock_info(Clock::Memory).unwrap(), 2619);
    assert_eq!(d.max_clock_info(Clock::SM).unwrap(), 1980);
    let reasons = d.current_throttle_reasons().unwrap();
    assert_eq!(
        reasons,
        ThrottleReasons::GPU_IDLE | ThrottleReasons::SW_POWER_CAP
    );
    assert_eq!(d.pcie_throughput(PcieUtilCounter::Send).unwrap(), 1000);
    assert_eq!(d.pcie_throughput(PcieUtilCounter::Receive).unwrap(), 2000);
    assert_eq!(d.num_fans().unwrap(), 1);
    assert_eq!(d.fan_speed(0).unwrap(), 30);

    // Energy: the base plus 350 W integrated over the wall time between the readings.
    let t0 = Instant::now();
    let e1 = d.total_energy_consumption().unwrap();
    let t1 = Instant::now();
    assert!(e1 >= 1_000_000, "energy {e1} below the base");
    sleep(ms(200));
    let t2 = Instant::now();
    let e2 = d.total_energy_consumption().unwrap();
    let t3 = Instant::now();
    let at_350_w = |from: Instant, to: Instant| (to - from).as_micros() as u64 * 350 / 1000;
    let grown = e2 - e1;
    let (low, high) = (at_350_w(t1, t2).saturating_sub(1), at_350_w(t0, t3) + 1);
    assert!(
        (low..=high).contains(&grown),
        "energy grew by {grown} mJ, expected {low}..={high}"
    );

    // Processes.
    let compute = d.running_compute_processes().unwrap();
    let summary: Vec<_> = compute
        .iter()
        .map(|p| (p.pid, p.used_gpu_memory.clone()))
        .collect();
    assert_eq!(
        summary,
        vec![
            (1234, UsedGpuMemory::Used(GIB)),
            (1235, UsedGpuMemory::Unavailable)
        ]
    );
    assert_eq!(compute[0].gpu_instance_id, None);
    assert_eq!(d.running_compute_processes_count().unwrap(), 2);
    let graphics = d.running_graphics_processes().unwrap();
    assert_eq!(graphics.len(), 1);
    assert_eq!(
        (graphics[0].pid, graphics[0].used_gpu_memory.clone()),
        (2000, UsedGpuMemory::Used(2 * GIB))
    );
    let mut samples = d.process_utilization_stats(None).unwrap();
    samples.sort_by_key(|s| s.pid);
    let summary: Vec<_> = samples
        .iter()
        .map(|s| (s.pid, s.sm_util, s.mem_util))
        .collect();
    assert_eq!(summary, vec![(1234, 80, 30), (2000, 5, 0)]);
    let stamp = samples[0].timestamp;
    assert!(stamp > 0);
    assert!(matches!(
        d.process_utilization_stats(u64::MAX),
        Err(NvmlError::NotFound)
    ));

    // A GPU with features switched off, and idle processes.
    assert!(matches!(d1.power_usage(), Err(NvmlError::NotSupported)));
    assert!(matches!(
        d1.total_energy_consumption(),
        Err(NvmlError::NotSupported)
    ));
    assert!(matches!(
        d1.temperature(TemperatureSensor::Gpu),
        Err(NvmlError::NotSupported)
    ));
    assert!(matches!(
        d1.pcie_throughput(PcieUtilCounter::Send),
        Err(NvmlError::NotSupported)
    ));
    assert!(matches!(
        d1.clock_info(Clock::SM),
        Err(NvmlError::NotSupported)
    ));
    assert!(matches!(
        d1.current_throttle_reasons(),
        Err(NvmlError::NotSupported)
    ));
    assert!(matches!(d1.fan_speed(0), Err(NvmlError::NotSupported)));
    assert!(d1.utilization_rates().is_ok());
    assert!(matches!(
        d1.process_utilization_stats(None),
        Err(NvmlError::NotFound)
    ));
    assert_eq!(d1.running_compute_processes().unwrap().len(), 1);
    assert!(d1.running_graphics_processes().unwrap().is_empty());

    // A lost GPU.
    assert!(matches!(nvml.device_by_index(2), Err(NvmlError::GpuLost)));
    assert!(matches!(
        nvml.device_by_uuid("GPU-00000000-0000-4000-8000-000000000002"),
        Err(NvmlError::GpuLost)
    ));
}
