//! The web config file: TLS and basic auth in the format of the Prometheus
//! exporters' `web-config.yml` (exporter-toolkit), so a fleet's existing
//! files and scrape configs carry over. Unknown keys and values this server
//! cannot honour are errors naming the file and the key.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use axum::http::{HeaderName, HeaderValue, header};

use crate::http::basic_auth::BasicAuth;
use crate::http::tls;
use crate::http::web_config_file::{KeyError, WebConfigFile};

/// What the server does with a loaded web config.
#[derive(Clone, Default)]
pub struct WebConfig {
    pub tls: Option<Arc<rustls::ServerConfig>>,
    pub auth: Option<Arc<BasicAuth>>,
    /// Every client must show a certificate signed by the client CA.
    pub client_certs_required: bool,
    /// Added to every response.
    pub headers: Vec<(HeaderName, HeaderValue)>,
    /// The files it was built from besides the web config file itself.
    pub files: Vec<PathBuf>,
}

#[derive(Debug, thiserror::Error)]
pub enum WebConfigError {
    #[error("cannot read web config file {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("invalid web config file {path}: {message}")]
    Parse { path: PathBuf, message: String },
    #[error("invalid web config file {path}: `{key}` {message}")]
    Invalid {
        path: PathBuf,
        key: String,
        message: String,
    },
}

/// Headers exporter-toolkit allows in `http_server_config.headers`.
const ALLOWED_HEADERS: [HeaderName; 5] = [
    header::STRICT_TRANSPORT_SECURITY,
    header::X_CONTENT_TYPE_OPTIONS,
    header::X_FRAME_OPTIONS,
    header::X_XSS_PROTECTION,
    header::CONTENT_SECURITY_POLICY,
];

impl WebConfig {
    pub fn load(path: &Path) -> Result<WebConfig, WebConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| WebConfigError::Read {
            path: path.to_owned(),
            source,
        })?;
        WebConfig::parse(&text, path)
    }

    /// Parses `text`; relative file names in it are relative to `path`'s folder.
    pub fn parse(text: &str, path: &Path) -> Result<WebConfig, WebConfigError> {
        let file: WebConfigFile =
            serde_saphyr::from_str(text).map_err(|e| WebConfigError::Parse {
                path: path.to_owned(),
                message: e.to_string().trim_end().to_owned(),
            })?;
        let dir = path.parent().unwrap_or(Path::new("."));
        file.build(dir).map_err(|e| WebConfigError::Invalid {
            path: path.to_owned(),
            key: e.key,
            message: e.message,
        })
    }
}

impl WebConfigFile {
    fn build(&self, dir: &Path) -> Result<WebConfig, KeyError> {
        let tls = match &self.tls_server_config {
            Some(t) => Some(Arc::new(tls::server_config(t, dir)?)),
            None => None,
        };
        let auth = if self.basic_auth_users.is_empty() {
            None
        } else {
            Some(Arc::new(BasicAuth::new(&self.basic_auth_users)?))
        };
        let mut headers = Vec::new();
        if let Some(http) = &self.http_server_config {
            if http.http2 == Some(true) {
                return Err(KeyError::new(
                    "http_server_config.http2",
                    "is not supported: stallwatch serves HTTP/1.1 (set it to false or remove it)",
                ));
            }
            for (name, value) in &http.headers {
                headers.push(header(name, value)?);
            }
        }
        let files = self
            .tls_server_config
            .iter()
            .flat_map(|t| [&t.cert_file, &t.key_file, &t.client_ca_file])
            .filter(|f| !f.is_empty())
            .map(|f| dir.join(f))
            .collect();
        let client_certs_required = self
            .tls_server_config
            .as_ref()
            .is_some_and(|t| t.client_auth_type == "RequireAndVerifyClientCert");
        Ok(WebConfig {
            tls,
            auth,
            client_certs_required,
            headers,
            files,
        })
    }
}

fn header(name: &str, value: &str) -> Result<(HeaderName, HeaderValue), KeyError> {
    let key = format!("http_server_config.headers.{name}");
    let Some(known) = ALLOWED_HEADERS
        .iter()
        .find(|h| h.as_str().eq_ignore_ascii_case(name))
    else {
        let allowed: Vec<&str> = ALLOWED_HEADERS.iter().map(|h| h.as_str()).collect();
        return Err(KeyError::new(
            key,
            format!("is not allowed (allowed: {})", allowed.join(", ")),
        ));
    };
    let value = HeaderValue::from_str(value)
        .map_err(|_| KeyError::new(&key, format!("{value:?} is not a valid header value")))?;
    Ok((known.clone(), value))
}

#[cfg(test)]
mod tests;
