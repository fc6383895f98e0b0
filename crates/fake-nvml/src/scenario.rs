//! The scenario file: what the stand-in library reports. See `docs/testing.md`.

use serde::Deserialize;

use crate::codes::ErrorCode;
use crate::pci::PciAddress;

/// At most this many GPUs (the size of the handle table).
pub const MAX_GPUS: usize = 64;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Scenario {
    pub driver_version: String,
    pub nvml_version: String,
    pub cuda_driver_version: i32,
    pub init_error: Option<ErrorCode>,
    pub gpus: Vec<Gpu>,
    pub faults: Vec<Fault>,
    /// A file the library appends the driver's `NVRM: Xid` lines to when a
    /// scripted Xid happens, as the driver writes them to the kernel log.
    pub kernel_log: Option<String>,
    /// Real drivers' latencies (see `latency.rs`); `STALLWATCH_FAKE_NVML_LATENCIES`
    /// overrides it when set.
    pub latencies: bool,
}

impl Default for Scenario {
    fn default() -> Self {
        Self {
            driver_version: "550.54.15".into(),
            nvml_version: "12.550.54.15".into(),
            cuda_driver_version: 12040,
            init_error: None,
            gpus: Vec::new(),
            faults: Vec::new(),
            kernel_log: None,
            latencies: true,
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Gpu {
    /// Empty: derived from the index.
    pub uuid: String,
    pub name: String,
    /// Empty: derived from the index.
    pub pci_bus_id: String,
    #[serde(skip)]
    pub pci: PciAddress,
    pub pci_device_id: u32,
    pub pci_subsystem_id: u32,
    pub lost: bool,
    pub utilization_gpu: u32,
    pub utilization_memory: u32,
    pub memory_total_bytes: u64,
    pub memory_used_bytes: u64,
    pub memory_reserved_bytes: u64,
    pub temperature_c: u32,
    pub power_mw: u32,
    pub power_limit_mw: u32,
    pub energy_mj: u64,
    pub sm_clock_mhz: u32,
    pub memory_clock_mhz: u32,
    pub max_sm_clock_mhz: u32,
    pub max_memory_clock_mhz: u32,
    pub clock_event_reasons: u64,
    pub pcie_tx_kbps: u32,
    pub pcie_rx_kbps: u32,
    pub fan_speed: u32,
    pub cuda_compute_capability: [i32; 2],
    pub unsupported: Vec<Feature>,
    pub processes: Vec<Process>,
    /// GPM readings; absent: the device does not support GPM.
    pub gpm: Option<Gpm>,
    /// MIG mode on, with these instances; absent: MIG not supported.
    pub mig: Option<Vec<MigInstance>>,
    /// Scripted Xid errors.
    pub xids: Vec<Xid>,
    /// ECC, retirement, remapping, NVLink and recovery counters; absent:
    /// every such field answers `NOT_SUPPORTED`.
    pub health: Option<Health>,
}

impl Default for Gpu {
    fn default() -> Self {
        Self {
            uuid: String::new(),
            name: "NVIDIA H100 80GB HBM3".into(),
            pci_bus_id: String::new(),
            pci: PciAddress::default(),
            pci_device_id: 0x2330_10DE,
            pci_subsystem_id: 0x16C1_10DE,
            lost: false,
            utilization_gpu: 0,
            utilization_memory: 0,
            memory_total_bytes: 80 << 30,
            memory_used_bytes: 0,
            memory_reserved_bytes: 0,
            temperature_c: 35,
            power_mw: 70_000,
            power_limit_mw: 700_000,
            energy_mj: 0,
            sm_clock_mhz: 1980,
            memory_clock_mhz: 2619,
            max_sm_clock_mhz: 1980,
            max_memory_clock_mhz: 2619,
            clock_event_reasons: 0,
            pcie_tx_kbps: 0,
            pcie_rx_kbps: 0,
            fan_speed: 0,
            cuda_compute_capability: [9, 0],
            unsupported: Vec::new(),
            processes: Vec::new(),
            gpm: None,
            mig: None,
            xids: Vec::new(),
            health: None,
        }
    }
}

impl Gpu {
    pub fn supports(&self, feature: Feature) -> bool {
        !self.unsupported.contains(&feature)
    }
}

/// Groups of calls that `unsupported` can switch to `NVML_ERROR_NOT_SUPPORTED`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Feature {
    Utilization,
    Memory,
    Temperature,
    Power,
    PowerLimit,
    Energy,
    Clocks,
    #[serde(alias = "throttle_reasons")]
    ClockEventReasons,
    Pcie,
    FanSpeed,
    Processes,
    ProcessUtilization,
    EncoderUtilization,
    DecoderUtilization,
    PerformanceState,
    PersistenceMode,
    ComputeMode,
    DisplayMode,
    CudaComputeCapability,
    Bar1Memory,
    MemoryBusWidth,
    Events,
    /// Field value 186, `NVML_FI_DEV_POWER_INSTANT` (drivers before it answer
    /// `NOT_SUPPORTED` for the field).
    PowerInstantField,
    /// Field values 197 and 198, the cumulative PCIe byte counters.
    PcieCounterFields,
}

/// What `nvmlGpmMetricsGet` reports between two samples of the device, in
/// NVML's units: utilizations in percent, rates in MiB/s. A sample holds the
/// values in the scenario when it was taken; the metrics are the later one's.
#[derive(Debug, Clone, Copy, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Gpm {
    pub graphics_util: f64,
    pub sm_util: f64,
    pub sm_occupancy: f64,
    pub any_tensor_util: f64,
    pub dram_bw_util: f64,
    pub pcie_tx_mibps: f64,
    pub pcie_rx_mibps: f64,
    pub nvlink_tx_mibps: f64,
    pub nvlink_rx_mibps: f64,
}

/// At most this many MIG instances per GPU (a real GPU has at most 7).
pub const MAX_MIG: usize = 7;

/// One MIG instance (a GPU instance with one compute instance), monitored
/// through its own device handle.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MigInstance {
    pub gpu_instance_id: u32,
    #[serde(default)]
    pub compute_instance_id: u32,
    /// Empty: derived from the parent's index and the instance IDs.
    #[serde(default)]
    pub uuid: String,
    /// Empty: the parent's name with ` MIG` and the profile.
    #[serde(default)]
    pub profile: String,
    #[serde(default = "mig_memory_default")]
    pub memory_total_bytes: u64,
    #[serde(default)]
    pub memory_used_bytes: u64,
    #[serde(default)]
    pub processes: Vec<Process>,
    /// GPM of this instance (`nvmlGpmMigSampleGet`); needs the parent's `gpm`.
    #[serde(default)]
    pub gpm: Option<Gpm>,
    /// GPU slices of the instance's GPU instance (1 to 7). Absent: the leading
    /// number of `profile` (`3g.40gb`: 3), and without a profile, unknown.
    /// After parsing: the resolved count.
    #[serde(default)]
    pub slices: Option<u32>,
    /// Slices of the compute instance: the `N` of a `Nc.Mg...` profile, else `slices`.
    #[serde(skip)]
    pub compute_slices: Option<u32>,
}

/// Slices of a GPU (A100, H100, H200: 7).
pub const GPU_SLICES: u32 = 7;

/// (GPU instance slices, compute instance slices when the profile names them)
/// from a MIG profile name: `3g.40gb` is (3, None), `1c.3g.40gb` (3, Some(1)),
/// `1g.10gb+me` (1, None). `None` when the name does not start that way.
pub fn profile_slices(profile: &str) -> Option<(u32, Option<u32>)> {
    let number = |part: &str, unit: char| -> Option<u32> {
        let digits = part.strip_suffix(unit)?;
        if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        digits.parse().ok()
    };
    let mut parts = profile.trim().split('.');
    let first = parts.next()?;
    match number(first, 'c') {
        Some(ci) => Some((number(parts.next()?, 'g')?, Some(ci))),
        None => Some((number(first, 'g')?, None)),
    }
}

fn mig_memory_default() -> u64 {
    10 << 30
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProcessType {
    #[default]
    Compute,
    Graphics,
    /// An MPS client: listed by the MPS calls only.
    Mps,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Process {
    pub pid: u32,
    /// Absent: reported as `NVML_VALUE_NOT_AVAILABLE`.
    #[serde(default)]
    pub used_memory_bytes: Option<u64>,
    #[serde(default)]
    pub sm_util: u32,
    #[serde(default)]
    pub mem_util: u32,
    #[serde(default, rename = "type")]
    pub kind: ProcessType,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Fault {
    pub call: String,
    #[serde(default)]
    pub gpu: Option<usize>,
    #[serde(default)]
    pub error: Option<ErrorCode>,
    #[serde(default)]
    pub delay_ms: u64,
}

impl Scenario {
    /// Parses and completes a scenario: derived defaults filled in, bus IDs parsed.
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut s: Scenario = serde_json::from_str(text).map_err(|e| e.to_string())?;
        if s.gpus.len() > MAX_GPUS {
            return Err(format!(
                "{} GPUs listed, at most {MAX_GPUS} supported",
                s.gpus.len()
            ));
        }
        for (i, gpu) in s.gpus.iter_mut().enumerate() {
            if gpu.uuid.is_empty() {
                gpu.uuid = format!("GPU-00000000-0000-4000-8000-{i:012x}");
            }
            if gpu.pci_bus_id.is_empty() {
                gpu.pci = PciAddress {
                    domain: 0,
                    bus: 0x10 + i as u32,
                    device: 0,
                    function: 0,
                };
            } else {
                gpu.pci = PciAddress::parse(&gpu.pci_bus_id).ok_or_else(|| {
                    format!("gpus[{i}].pci_bus_id: cannot parse {:?}", gpu.pci_bus_id)
                })?;
            }
            gpu.pci_bus_id = gpu.pci.to_string();
            let mig = gpu.mig.as_deref_mut().unwrap_or_default();
            if mig.len() > MAX_MIG {
                return Err(format!(
                    "gpus[{i}].mig: {} instances listed, at most {MAX_MIG}",
                    mig.len()
                ));
            }
            resolve_slices(i, mig)?;
            for m in mig.iter_mut() {
                if m.uuid.is_empty() {
                    m.uuid = format!(
                        "MIG-00000000-0000-4000-8000-{i:04x}{:04x}{:04x}",
                        m.gpu_instance_id, m.compute_instance_id
                    );
                }
                if m.profile.is_empty() {
                    m.profile = "1g.10gb".into();
                }
            }
        }
        Ok(s)
    }

    /// The first fault that matches `call` (an exported symbol name) on `gpu`
    /// (`None` for calls that are not about one device).
    pub fn fault(&self, call: &str, gpu: Option<usize>) -> Option<&Fault> {
        let call = call_family(call);
        self.faults
            .iter()
            .find(|f| call_family(&f.call) == call && (f.gpu.is_none() || f.gpu == gpu))
    }
}

/// Fills in each instance's `slices` and `compute_slices` and checks them:
/// each within 1..=7, a compute instance no larger than its GPU instance,
/// instances of one GPU instance agreeing, and the GPU instances of GPU `gpu`
/// taking no more than the GPU's 7 slices.
fn resolve_slices(gpu: usize, mig: &mut [MigInstance]) -> Result<(), String> {
    let range = 1..=GPU_SLICES;
    for (n, m) in mig.iter_mut().enumerate() {
        let from_profile = profile_slices(&m.profile);
        if let Some(s) = m.slices {
            if !range.contains(&s) {
                return Err(format!(
                    "gpus[{gpu}].mig[{n}].slices: {s} is out of range, a GPU instance has 1 to {GPU_SLICES} slices"
                ));
            }
        } else if let Some((s, _)) = from_profile {
            if !range.contains(&s) {
                return Err(format!(
                    "gpus[{gpu}].mig[{n}].profile: {:?} names {s} GPU slices, out of range 1 to {GPU_SLICES}",
                    m.profile
                ));
            }
            m.slices = Some(s);
        }
        let ci = from_profile.and_then(|(_, ci)| ci);
        m.compute_slices = ci.or(m.slices);
        if let (Some(ci), Some(gi)) = (ci, m.slices)
            && !(1..=gi).contains(&ci)
        {
            return Err(format!(
                "gpus[{gpu}].mig[{n}].profile: {:?} names a compute instance of {ci} slices in a GPU instance of {gi}",
                m.profile
            ));
        }
    }
    // Compute instances of one GPU instance share its slices: count each GPU instance once.
    let mut instances: Vec<(u32, u32, usize)> = Vec::new();
    for (n, m) in mig.iter().enumerate() {
        let Some(s) = m.slices else { continue };
        match instances.iter().find(|(id, _, _)| *id == m.gpu_instance_id) {
            Some(&(id, other, at)) if other != s => {
                return Err(format!(
                    "gpus[{gpu}].mig[{n}].slices: {s} differs from the {other} of gpus[{gpu}].mig[{at}], in the same GPU instance {id}"
                ));
            }
            Some(_) => {}
            None => instances.push((m.gpu_instance_id, s, n)),
        }
    }
    let total: u32 = instances.iter().map(|(_, s, _)| s).sum();
    if total > GPU_SLICES {
        return Err(format!(
            "gpus[{gpu}].mig: the GPU instances take {total} slices (`slices` or the profiles' leading numbers), more than the {GPU_SLICES} a GPU has"
        ));
    }
    Ok(())
}

/// A symbol name without its `_vN` suffix, with renamed calls folded together.
pub fn call_family(name: &str) -> &str {
    let name = name.trim();
    let base = match name.rfind("_v") {
        Some(at) if name[at + 2..].chars().all(|c| c.is_ascii_digit()) && at + 2 < name.len() => {
            &name[..at]
        }
        _ => name,
    };
    match base {
        "nvmlDeviceGetCurrentClocksEventReasons" => "nvmlDeviceGetCurrentClocksThrottleReasons",
        "nvmlInitWithFlags" => "nvmlInit",
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn call_families() {
        assert_eq!(call_family("nvmlInit_v2"), "nvmlInit");
        assert_eq!(call_family("nvmlInitWithFlags"), "nvmlInit");
        assert_eq!(
            call_family("nvmlDeviceGetMemoryInfo_v2"),
            "nvmlDeviceGetMemoryInfo"
        );
        assert_eq!(
            call_family("nvmlDeviceGetTemperatureV"),
            "nvmlDeviceGetTemperatureV"
        );
        assert_eq!(
            call_family("nvmlDeviceGetCurrentClocksEventReasons"),
            "nvmlDeviceGetCurrentClocksThrottleReasons"
        );
    }

    #[test]
    fn defaults_and_rejections() {
        let s = Scenario::parse(r#"{"gpus": [{}, {"pci_bus_id": "0000:3b:00.0"}]}"#).unwrap();
        assert_eq!(s.gpus[0].pci_bus_id, "00000000:10:00.0");
        assert_eq!(s.gpus[1].pci_bus_id, "00000000:3B:00.0");
        assert_eq!(s.gpus[1].uuid, "GPU-00000000-0000-4000-8000-000000000001");
        assert!(Scenario::parse(r#"{"gpu": []}"#).is_err());
        assert!(Scenario::parse(r#"{"gpus": [{"unsupported": ["warp_drive"]}]}"#).is_err());
        assert!(Scenario::parse(r#"{"init_error": "nonsense"}"#).is_err());
        assert_eq!(
            Scenario::parse(r#"{"init_error": 9}"#)
                .unwrap()
                .init_error
                .unwrap()
                .0,
            9
        );
    }

    #[test]
    fn latencies_switch() {
        assert!(Scenario::parse("{}").unwrap().latencies);
        assert!(
            !Scenario::parse(r#"{"latencies": false}"#)
                .unwrap()
                .latencies
        );
        assert!(Scenario::parse(r#"{"latencies": "no"}"#).is_err());
    }

    #[test]
    fn new_features_parse() {
        let s = Scenario::parse(
            r#"{"gpus": [{"unsupported": ["power_instant_field", "pcie_counter_fields"]}]}"#,
        )
        .unwrap();
        assert!(!s.gpus[0].supports(Feature::PowerInstantField));
        assert!(!s.gpus[0].supports(Feature::PcieCounterFields));
        assert!(s.gpus[0].supports(Feature::Pcie));
    }

    #[test]
    fn profile_names() {
        assert_eq!(profile_slices("3g.40gb"), Some((3, None)));
        assert_eq!(profile_slices("1g.10gb"), Some((1, None)));
        assert_eq!(profile_slices("4g.40gb"), Some((4, None)));
        assert_eq!(profile_slices("7g.80gb"), Some((7, None)));
        assert_eq!(profile_slices("1g.10gb+me"), Some((1, None)));
        assert_eq!(profile_slices("1c.3g.40gb"), Some((3, Some(1))));
        assert_eq!(profile_slices(""), None);
        assert_eq!(profile_slices("g.10gb"), None);
        assert_eq!(profile_slices("+3g.10gb"), None);
        assert_eq!(profile_slices("three"), None);
        assert_eq!(profile_slices("1c.big"), None);
    }

    fn mig(instances: &str) -> Result<Vec<MigInstance>, String> {
        let text = format!(r#"{{"gpus": [{{"mig": {instances}}}]}}"#);
        Scenario::parse(&text).map(|mut s| s.gpus.remove(0).mig.unwrap())
    }

    #[test]
    fn mig_slices_from_the_field_or_the_profile() {
        let m = mig(r#"[
            {"gpu_instance_id": 1, "profile": "3g.40gb"},
            {"gpu_instance_id": 2, "profile": "1g.10gb", "slices": 2},
            {"gpu_instance_id": 3},
            {"gpu_instance_id": 4, "profile": "custom"},
            {"gpu_instance_id": 5, "profile": "1c.1g.10gb"}
        ]"#)
        .unwrap();
        let got: Vec<_> = m.iter().map(|m| (m.slices, m.compute_slices)).collect();
        assert_eq!(
            got,
            [
                (Some(3), Some(3)),
                (Some(2), Some(2)),
                (None, None),
                (None, None),
                (Some(1), Some(1)),
            ]
        );
        // No profile: the name still has the default profile; the slices stay unknown.
        assert_eq!(m[2].profile, "1g.10gb");
        // Compute instances of one GPU instance share its slices.
        let m = mig(r#"[
            {"gpu_instance_id": 1, "compute_instance_id": 0, "profile": "1c.4g.40gb"},
            {"gpu_instance_id": 1, "compute_instance_id": 1, "profile": "3c.4g.40gb"},
            {"gpu_instance_id": 2, "profile": "3g.40gb"}
        ]"#)
        .unwrap();
        assert_eq!(m[0].compute_slices, Some(1));
        assert_eq!(m[1].compute_slices, Some(3));
        assert_eq!(m[1].slices, Some(4));
        mig(r#"[{"gpu_instance_id": 1, "profile": "7g.80gb"}]"#).unwrap();
    }

    #[test]
    fn mig_slices_rejected() {
        let err = |instances: &str| mig(instances).unwrap_err();
        let e = err(r#"[{"gpu_instance_id": 1, "slices": 0}]"#);
        assert!(
            e.contains("gpus[0].mig[0].slices") && e.contains("out of range"),
            "{e}"
        );
        let e = err(r#"[{"gpu_instance_id": 1}, {"gpu_instance_id": 2, "slices": 8}]"#);
        assert!(e.contains("gpus[0].mig[1].slices"), "{e}");
        let e = err(r#"[{"gpu_instance_id": 1, "profile": "8g.90gb"}]"#);
        assert!(e.contains("gpus[0].mig[0].profile"), "{e}");
        let e = err(r#"[{"gpu_instance_id": 1, "profile": "4c.3g.40gb"}]"#);
        assert!(e.contains("gpus[0].mig[0].profile"), "{e}");
        let e = err(r#"[{"gpu_instance_id": 1, "profile": "4g.40gb"},
                       {"gpu_instance_id": 2, "profile": "3g.40gb"},
                       {"gpu_instance_id": 3, "slices": 1}]"#);
        assert!(
            e.contains("gpus[0].mig") && e.contains("8 slices") && e.contains("more than the 7"),
            "{e}"
        );
        let e = err(r#"[{"gpu_instance_id": 1, "slices": 2},
                       {"gpu_instance_id": 1, "compute_instance_id": 1, "slices": 3}]"#);
        assert!(
            e.contains("gpus[0].mig[1].slices") && e.contains("GPU instance 1"),
            "{e}"
        );
        assert!(mig(r#"[{"gpu_instance_id": 1, "slices": -1}]"#).is_err());
    }

    #[test]
    fn docs_example_parses() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/testing.md");
        let doc = std::fs::read_to_string(path).expect("docs/testing.md");
        let example = doc
            .split("### Example scenario")
            .nth(1)
            .expect("example section");
        let json = example
            .split("```json")
            .nth(1)
            .and_then(|b| b.split("```").next());
        let s = Scenario::parse(json.expect("json block")).unwrap();
        assert_eq!(s.gpus.len(), 2);
        assert_eq!(s.gpus[1].pci_bus_id, "00000000:3B:00.0");
        assert!(!s.gpus[1].supports(Feature::Energy));
        assert_eq!(
            s.fault("nvmlDeviceGetUtilizationRates", Some(1))
                .unwrap()
                .delay_ms,
            30_000
        );
        assert!(s.fault("nvmlDeviceGetUtilizationRates", Some(0)).is_none());
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Xid {
    pub xid: u64,
    #[serde(default)]
    pub at_ms: u64,
    #[serde(default)]
    pub pid: Option<u32>,
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub message: Option<String>,
    /// Delivered as an NVML event (real drivers miss some, e.g. 79).
    #[serde(default = "yes")]
    pub nvml_event: bool,
    /// Written to the kernel log.
    #[serde(default = "yes")]
    pub kernel_log: bool,
}

fn yes() -> bool {
    true
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Health {
    pub ecc_corrected: u64,
    pub ecc_uncorrected: u64,
    pub retired_pages_single_bit: u64,
    pub retired_pages_double_bit: u64,
    pub retired_pages_pending: bool,
    pub remapped_rows_correctable: u64,
    pub remapped_rows_uncorrectable: u64,
    pub row_remap_pending: bool,
    pub row_remap_failure: bool,
    pub nvlink_crc_flit_errors: u64,
    pub nvlink_crc_data_errors: u64,
    pub nvlink_replay_errors: u64,
    pub nvlink_recovery_errors: u64,
    /// `nvmlDeviceGpuRecoveryAction_t`: 0 none, 1 GPU reset, 2 node reboot,
    /// 3 drain P2P, 4 drain and reset.
    pub recovery_action: u32,
}
