//! The `stallwatch` daemon: configuration, the sampling loop, the HTTP
//! server (`/metrics`, `/healthz`, the JSON API and the status page) and the
//! command line.

pub mod api;
pub mod cli;
pub mod commands;
pub mod config;
pub mod contained;
pub mod fleet;
pub mod http;
pub mod logging;
pub mod metrics;
pub mod notify;
pub mod own_cost;
pub mod sampling;
