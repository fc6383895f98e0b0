//! Stall diagnosis for stallwatch: pure and sans-IO (no threads, no files,
//! no clock). Frames come in with their time; per-GPU verdicts, active kinds
//! with evidence and hints, and start/end events come out. Every rule can be
//! driven by a scripted sequence of frames.

pub mod calls;
pub mod config;
pub mod confirm;
pub mod costliest;
mod detect;
pub mod engine;
pub mod evidence;
pub mod framework;
pub mod hint;
pub mod hysteresis;
mod kinds;
pub mod ledger;
pub mod phase;
mod processes;
mod report;
mod round;
pub mod stack_report;
pub mod stack_text;
pub mod steal;
mod tracking;
pub mod types;
pub mod window;

// The data types keep their paths from the crate's root.
pub use types::{frame, kind, status};

pub use config::DiagnosisConfig;
pub use engine::Engine;
pub use types::frame::Frame;
pub use types::kind::{Kind, Verdict};
pub use types::status::{Event, GpuStatus, Phase};
