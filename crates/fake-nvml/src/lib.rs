//! A stand-in `libnvidia-ml.so.1`: exports the NVML C API that the collector,
//! `nvml-wrapper` and pynvml-based tools use, answering from a JSON scenario file
//! named by `STALLWATCH_FAKE_NVML`. The file is re-read whenever it changes.
//! See `docs/testing.md` for the scenario format.
//!
//! Every export is a C function; pointer arguments follow NVML's contracts (null or
//! valid for the documented reads and writes). No call panics across the boundary:
//! a panic inside becomes `NVML_ERROR_UNKNOWN`.

// The exports keep NVML's C names, and their safety contract is NVML's own.
#![allow(non_snake_case, clippy::missing_safety_doc)]

mod abi;
mod call;
mod clocks;
mod codes;
mod compat;
mod device;
mod extras;
mod fields;
mod gpm;
mod health;
mod latency;
mod mig;
mod pci;
mod power;
mod process;
mod scenario;
mod state;
mod system;
mod telemetry;
mod watch;
mod xids;

/// Parses a scenario file's text as the library does on each load, then asks
/// it what the exports ask: each fault's lookup on every GPU, each GPU's
/// PCI bus ID in both forms, and each MIG instance's attributes. Returns the number of GPUs. For the fuzz targets
/// and the corpus replay test; the library itself reads files only.
#[doc(hidden)]
pub fn check_scenario(text: &str) -> Result<usize, String> {
    let s = scenario::Scenario::parse(text)?;
    for fault in &s.faults {
        for gpu in [None, fault.gpu, Some(0)] {
            let _ = s.fault(&fault.call, gpu);
        }
    }
    for gpu in &s.gpus {
        for m in gpu.mig.iter().flatten() {
            let _ = mig::attributes(m);
        }
        let _ = gpu.pci.legacy();
        assert_eq!(
            pci::PciAddress::parse(&gpu.pci_bus_id),
            Some(gpu.pci),
            "a completed bus ID parses back to itself"
        );
    }
    Ok(s.gpus.len())
}
