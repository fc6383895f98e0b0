//! `stallwatch fleet`: one answer per distributed run, from the fleet's
//! Prometheus (the run rules of deploy/prometheus/stallwatch.runs.yml) and,
//! for a run's culprits, their hosts' own evidence.

pub mod model;
pub mod prometheus;
