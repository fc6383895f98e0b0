use std::collections::BTreeMap;
use std::sync::atomic::Ordering;

use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use base64::Engine;

use super::{BasicAuth, DUMMY_HASH};

/// bcrypt of "s3cret" at cost 10, as htpasswd -B writes it ($2y$).
const HASH: &str = "$2y$10$oGDU.u.oEdSnW58w5qM7JukbWsPRBeaI3kuYwU1jBoZ7eQHeYuZGC";

fn auth() -> BasicAuth {
    let users = BTreeMap::from([("prometheus".to_owned(), HASH.to_owned())]);
    BasicAuth::new(&users).unwrap()
}

fn basic(user: &str, password: &str) -> HeaderMap {
    let token = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
    let mut h = HeaderMap::new();
    h.insert(
        header::AUTHORIZATION,
        HeaderValue::from_str(&format!("Basic {token}")).unwrap(),
    );
    h
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

#[test]
fn the_dummy_hash_is_a_real_bcrypt_hash() {
    assert!(bcrypt::verify("stallwatch", DUMMY_HASH).unwrap());
}

#[test]
fn good_credentials_pass_and_bad_ones_get_401_with_a_challenge() {
    runtime().block_on(async {
        let auth = auth();
        assert!(auth.check(&basic("prometheus", "s3cret")).await.is_ok());
        for headers in [
            basic("prometheus", "wrong"),
            basic("nobody", "s3cret"),
            HeaderMap::new(),
        ] {
            let refused = auth.check(&headers).await.unwrap_err();
            assert_eq!(refused.status(), StatusCode::UNAUTHORIZED);
            let challenge = refused.headers()[header::WWW_AUTHENTICATE]
                .to_str()
                .unwrap();
            assert!(challenge.starts_with("Basic "), "{challenge}");
        }
    });
}

#[test]
fn a_password_that_passed_is_not_hashed_again() {
    runtime().block_on(async {
        let auth = auth();
        let headers = basic("prometheus", "s3cret");
        for _ in 0..20 {
            auth.check(&headers).await.unwrap();
        }
        assert_eq!(auth.bcrypt_checks.load(Ordering::Relaxed), 1);
        // A wrong password after a good one is still checked, and refused.
        assert!(auth.check(&basic("prometheus", "s3cre")).await.is_err());
        assert_eq!(auth.bcrypt_checks.load(Ordering::Relaxed), 2);
        auth.check(&headers).await.unwrap();
        assert_eq!(auth.bcrypt_checks.load(Ordering::Relaxed), 2);
    });
}
