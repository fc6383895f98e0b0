//! Diagnosis's data, with no logic beyond small accessors: what comes in
//! (`frame`, the stack `reads`) and what the engine shows (`status` with its
//! `evidence`, `stack_report`, `phase`, `ledger`, ...). The logic modules
//! import these types, not each other's logic, to speak of them; the crate's
//! public paths (`diagnosis::frame`, `diagnosis::status`,
//! `diagnosis::evidence::Evidence`, ...) re-export them.

pub mod activity;
pub mod evidence;
pub mod frame;
pub mod framework;
pub mod kind;
pub mod ledger;
pub mod phase;
pub mod reads;
pub mod stack_report;
pub mod status;
pub mod stuck;
pub mod time_state;
