//! What each `stallwatch` command does (`run`, `check`, `status`, `stacks`, `fleet`,
//! `fleet goodput`, `fleet causes`, the hidden `replay`), and the terminal report they print. The
//! arguments are in `crate::cli`.

pub mod causes;
pub mod check;
pub mod fleet;
pub mod goodput;
pub mod replay;
pub mod report;
pub mod run;
pub mod stacks;
pub mod status;
