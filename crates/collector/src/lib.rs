//! The only code in stallwatch that reads NVML or `/proc`, or asks the
//! kubelet which pod holds a GPU.
//!
//! Readers produce a raw [`sample::Sample`] (cumulative counters, canonical
//! units, one timestamp); [`delta`] turns two of them into a
//! [`snapshot::Snapshot`], which is all the rest of the program reads.

pub mod collector;
pub mod delta;
pub mod error;
pub mod faults;
pub mod gpu;
pub mod identity;
pub mod meter;
pub mod proc;
pub mod sample;
pub mod snapshot;
pub mod thread_reads;
pub mod time;

pub use error::CollectError;
pub mod privileges;
pub mod stack_reader;
