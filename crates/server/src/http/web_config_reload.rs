//! Picks up changes to the web config file and the files it names (rotated
//! certificates, changed passwords) without a restart, as exporter-toolkit
//! does: new connections use the new config; a file that no longer loads is
//! logged and the previous config stays in force.

use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime};

use crate::http::web_config::WebConfig;

/// How often the files' modification times are looked at, at most.
const CHECK_EVERY: Duration = Duration::from_secs(1);

pub struct WebConfigSource {
    path: Option<PathBuf>,
    state: Mutex<State>,
}

struct State {
    current: Arc<WebConfig>,
    stamp: Vec<Option<SystemTime>>,
    checked: Instant,
}

impl WebConfigSource {
    /// `config` was loaded from `path` (`None`: no web config, nothing to watch).
    pub fn new(path: Option<PathBuf>, config: WebConfig) -> Self {
        let stamp = stamp(path.as_ref(), &config);
        WebConfigSource {
            path,
            state: Mutex::new(State {
                current: Arc::new(config),
                stamp,
                checked: Instant::now(),
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The config for a new connection, reloaded first if a file changed.
    pub fn current(&self) -> Arc<WebConfig> {
        let mut s = self.lock();
        let Some(path) = &self.path else {
            return s.current.clone();
        };
        if s.checked.elapsed() < CHECK_EVERY {
            return s.current.clone();
        }
        s.checked = Instant::now();
        let now = stamp(Some(path), &s.current);
        if now == s.stamp {
            return s.current.clone();
        }
        // Remember the failed stamp too: one error line per change, not per connection.
        s.stamp = now;
        match WebConfig::load(path) {
            Ok(config) => {
                tracing::info!(
                    path = %path.display(),
                    tls = config.tls.is_some(),
                    basic_auth = config.auth.is_some(),
                    "web config reloaded"
                );
                s.stamp = stamp(Some(path), &config);
                s.current = Arc::new(config);
            }
            Err(e) => tracing::error!("{e}; keeping the web config loaded before"),
        }
        s.current.clone()
    }
}

/// Modification times of the web config file and every file it names.
fn stamp(path: Option<&PathBuf>, config: &WebConfig) -> Vec<Option<SystemTime>> {
    path.into_iter()
        .chain(&config.files)
        .map(|p| std::fs::metadata(p).and_then(|m| m.modified()).ok())
        .collect()
}
