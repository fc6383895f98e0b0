//! The sampling side: the sampler thread (sample, derive, diagnose, publish), the
//! frame handed to the diagnosis engine, the history behind the charts and the
//! stacks thread that reads Python stacks, and the `/metrics` bodies made
//! ahead of the scrapes (`bodies`, deflated by `gzip`) that the route serves.

pub mod asked;
pub mod bodies;
pub mod frame;
pub mod gzip;
pub mod history;
pub mod privileges;
pub mod sampler;
pub mod stack_bursts;
