//! `stallwatch fleet`: one answer per distributed run, from the fleet's
//! Prometheus (the run rules of deploy/prometheus/stallwatch.runs.yml) and,
//! for a run's culprits, their hosts' own evidence; `stallwatch fleet
//! goodput`: where the fleet's GPU-hours went, from the hourly rules;
//! `stallwatch fleet causes`: the lines of the jobs' code that lost them.

pub mod causes;
pub mod goodput;
pub mod model;
pub mod prometheus;
pub mod range;
