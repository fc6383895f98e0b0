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
mod pci;
mod power;
mod process;
mod scenario;
mod state;
mod system;
mod telemetry;
mod watch;
