//! The web config file as written: its keys, parsed and not yet checked, and the
//! error for one bad key. Shared by the parts that build from it (`tls`,
//! `basic_auth`) and by `web_config`, which puts them together.

use std::collections::BTreeMap;

use serde::Deserialize;

#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct WebConfigFile {
    pub tls_server_config: Option<TlsServerConfig>,
    pub http_server_config: Option<HttpServerConfig>,
    pub basic_auth_users: BTreeMap<String, String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TlsServerConfig {
    pub cert_file: String,
    pub key_file: String,
    /// The certificate chain as PEM text (instead of `cert_file`).
    pub cert: String,
    /// The private key as PEM text (instead of `key_file`).
    pub key: String,
    pub client_auth_type: String,
    pub client_ca_file: String,
    /// Client CA certificates as PEM text (instead of `client_ca_file`).
    pub client_ca: String,
    pub cipher_suites: Vec<String>,
    pub curve_preferences: Vec<String>,
    pub min_version: String,
    pub max_version: String,
    pub prefer_server_cipher_suites: Option<bool>,
    pub client_allowed_sans: Vec<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct HttpServerConfig {
    pub http2: Option<bool>,
    pub headers: BTreeMap<String, String>,
}

/// A problem with one key, before the file's path is attached.
#[derive(Debug)]
pub struct KeyError {
    pub key: String,
    pub message: String,
}

impl KeyError {
    pub fn new(key: impl Into<String>, message: impl Into<String>) -> Self {
        KeyError {
            key: key.into(),
            message: message.into(),
        }
    }
}
