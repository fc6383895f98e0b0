//! The sampling side: the sampler thread (sample, derive, diagnose, publish), the
//! frame handed to the diagnosis engine, the history behind the charts and the
//! stacks thread that reads Python stacks.

pub mod frame;
pub mod history;
pub mod sampler;
pub mod stacks;
