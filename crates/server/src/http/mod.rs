//! The HTTP transport under the routes: the accept loop, limits on slow and hostile
//! clients, connection tracking, TLS, basic auth and the web config with its reload.

pub mod basic_auth;
pub mod conn_activity;
pub mod limits;
pub mod serve;
pub mod tls;
pub mod web_config;
pub mod web_config_file;
pub mod web_config_reload;
