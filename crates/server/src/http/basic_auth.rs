//! HTTP basic auth against bcrypt hashes (`basic_auth_users`). A bcrypt check
//! costs tens of milliseconds, so, like exporter-toolkit, credentials that
//! passed are remembered: as an HMAC under a key made at start, compared in
//! constant time. Checks run one at a time off the async thread.

use std::collections::{BTreeMap, HashMap};
use std::str::FromStr;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use base64::Engine;
use ring::hmac;
use ring::rand::SystemRandom;
use tokio::sync::Semaphore;

use crate::http::web_config_file::KeyError;

/// Checked against when the user is unknown, so that the answer takes as
/// long as for a known user (bcrypt of "stallwatch" at cost 10).
const DUMMY_HASH: &str = "$2b$10$5Q7awWuCqIfDDsVyP3psxOB4RN3GXwtmW7GHRHFDYVSMU6bMyd32C";

pub struct BasicAuth {
    users: HashMap<String, String>,
    key: hmac::Key,
    /// The HMAC of the last password that passed, per user.
    passed: Mutex<HashMap<String, hmac::Tag>>,
    bcrypt: Semaphore,
    /// bcrypt checks made so far.
    bcrypt_checks: AtomicUsize,
}

impl BasicAuth {
    pub fn new(users: &BTreeMap<String, String>) -> Result<BasicAuth, KeyError> {
        for (user, hash) in users {
            let key = format!("basic_auth_users.{user}");
            if user.contains(':') {
                return Err(KeyError::new(key, "user names cannot contain ':'"));
            }
            bcrypt::HashParts::from_str(hash)
                .map_err(|e| KeyError::new(&key, format!("is not a bcrypt hash: {e}")))?;
        }
        let key = hmac::Key::generate(hmac::HMAC_SHA256, &SystemRandom::new())
            .map_err(|_| KeyError::new("basic_auth_users", "cannot make a random key"))?;
        Ok(BasicAuth {
            users: users.clone().into_iter().collect(),
            key,
            passed: Mutex::new(HashMap::new()),
            bcrypt: Semaphore::new(1),
            bcrypt_checks: AtomicUsize::new(0),
        })
    }

    /// `Ok` when the request carries a configured user's password, else the
    /// 401 response to send.
    pub async fn check(&self, headers: &HeaderMap) -> Result<(), Response> {
        let Some((user, password)) = credentials(headers) else {
            return Err(unauthorized());
        };
        let message = [user.as_bytes(), b"\0", password.as_bytes()].concat();
        if self.remembered(&user, &message) {
            return Ok(());
        }
        let hash = self.users.get(&user).cloned();
        let known = hash.is_some();
        let hash = hash.unwrap_or_else(|| DUMMY_HASH.to_owned());
        let ok = {
            let _one_at_a_time = self.bcrypt.acquire().await;
            self.bcrypt_checks.fetch_add(1, Ordering::Relaxed);
            tokio::task::spawn_blocking(move || {
                let ok = bcrypt::verify(password, &hash).unwrap_or(false);
                crate::own_cost::charge(crate::own_cost::Stage::Http);
                ok
            })
            .await
            .unwrap_or(false)
        };
        if ok && known {
            self.lock().insert(user, hmac::sign(&self.key, &message));
            Ok(())
        } else {
            Err(unauthorized())
        }
    }

    fn remembered(&self, user: &str, message: &[u8]) -> bool {
        self.lock()
            .get(user)
            .is_some_and(|tag| hmac::verify(&self.key, message, tag.as_ref()).is_ok())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, hmac::Tag>> {
        self.passed.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// User and password from `Authorization: Basic ...`.
fn credentials(headers: &HeaderMap) -> Option<(String, String)> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, encoded) = value.trim().split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(encoded.trim())
        .ok()?;
    let decoded = String::from_utf8(decoded).ok()?;
    let (user, password) = decoded.split_once(':')?;
    Some((user.to_owned(), password.to_owned()))
}

fn unauthorized() -> Response {
    (
        StatusCode::UNAUTHORIZED,
        [(
            header::WWW_AUTHENTICATE,
            HeaderValue::from_static("Basic realm=\"stallwatch\", charset=\"UTF-8\""),
        )],
        "Unauthorized\n",
    )
        .into_response()
}

#[cfg(test)]
mod tests;
