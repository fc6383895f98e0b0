//! The `stallwatch` daemon: configuration, the sampling loop, the HTTP
//! server (`/metrics`, `/healthz`, the JSON API and the status page) and the
//! command line.

pub mod api;
pub mod basic_auth;
pub mod check;
pub mod cli;
pub mod config;
pub mod conn_activity;
pub mod frame;
pub mod health;
pub mod history;
pub mod history_api;
pub mod http;
pub mod limits;
pub mod logging;
pub mod metrics;
pub mod notify;
pub mod page;
pub mod report;
pub mod run;
pub mod sampler;
pub mod serve;
pub mod stacks;
pub mod stacks_api;
pub mod stacks_cmd;
pub mod status_cmd;
pub mod tls;
pub mod web_config;
pub mod web_config_reload;
