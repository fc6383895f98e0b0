use std::path::{Path, PathBuf};

use super::{WebConfig, WebConfigError};

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tls")
}

fn parse(text: &str) -> Result<WebConfig, WebConfigError> {
    WebConfig::parse(text, &fixtures().join("web-config.yml"))
}

fn error(text: &str) -> String {
    match parse(text) {
        Ok(_) => panic!("accepted:\n{text}"),
        Err(e) => e.to_string(),
    }
}

const TLS: &str = "tls_server_config:\n  cert_file: cert.pem\n  key_file: key.pem\n";

#[test]
fn an_empty_file_means_plain_http_without_auth() {
    let web = parse("").unwrap();
    assert!(web.tls.is_none() && web.auth.is_none() && web.headers.is_empty());
}

#[test]
fn relative_files_are_found_next_to_the_web_config() {
    let web = parse(TLS).unwrap();
    let tls = web.tls.unwrap();
    assert_eq!(tls.alpn_protocols, vec![b"http/1.1".to_vec()]);
}

#[test]
fn an_exporter_toolkit_file_with_every_supported_key_loads() {
    let text = format!(
        "{TLS}  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: cert.pem\n\
         \x20 min_version: TLS12\n  max_version: TLS13\n\
         \x20 cipher_suites: [TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256, TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305]\n\
         \x20 curve_preferences: [X25519, CurveP256]\n  prefer_server_cipher_suites: true\n\
         http_server_config:\n  http2: false\n  headers:\n    Strict-Transport-Security: max-age=31536000\n\
         basic_auth_users:\n  prometheus: $2y$10$oGDU.u.oEdSnW58w5qM7JukbWsPRBeaI3kuYwU1jBoZ7eQHeYuZGC\n"
    );
    let web = parse(&text).unwrap();
    assert!(web.tls.is_some() && web.auth.is_some());
    assert_eq!(web.headers[0].0.as_str(), "strict-transport-security");
}

#[test]
fn unknown_keys_name_the_file_and_the_key() {
    let err = error("tls_server_config:\n  cert_file: cert.pem\n  key_fil: key.pem\n");
    assert!(err.contains("web-config.yml"), "{err}");
    assert!(err.contains("key_fil"), "{err}");
    let err = error("basic_auth:\n  a: b\n");
    assert!(err.contains("basic_auth"), "{err}");
}

#[test]
fn unsupported_values_name_the_key() {
    let cases = [
        ("  min_version: TLS10\n", "tls_server_config.min_version"),
        ("  max_version: TLS14\n", "tls_server_config.max_version"),
        (
            "  client_auth_type: RequireAnyClientCert\n",
            "tls_server_config.client_auth_type",
        ),
        (
            "  client_auth_type: RequireAndVerifyClientCert\n",
            "tls_server_config.client_ca_file",
        ),
        (
            "  cipher_suites: [TLS_RSA_WITH_AES_128_CBC_SHA]\n",
            "tls_server_config.cipher_suites",
        ),
        (
            "  curve_preferences: [CurveP521]\n",
            "tls_server_config.curve_preferences",
        ),
        (
            "  client_allowed_sans: [a]\n",
            "tls_server_config.client_allowed_sans",
        ),
        (
            "  client_ca_file: cert.pem\n",
            "tls_server_config.client_auth_type",
        ),
    ];
    for (line, key) in cases {
        let err = error(&format!("{TLS}{line}"));
        assert!(err.contains(&format!("`{key}`")), "{line}: {err}");
        assert!(err.contains("web-config.yml"), "{err}");
    }
}

#[test]
fn missing_or_bad_files_are_reported() {
    let err = error("tls_server_config:\n  key_file: key.pem\n");
    assert!(
        err.contains("`tls_server_config.cert_file` is required"),
        "{err}"
    );
    let err = error("tls_server_config:\n  cert_file: nope.pem\n  key_file: key.pem\n");
    assert!(err.contains("nope.pem"), "{err}");
    let err = error("tls_server_config:\n  cert_file: key.pem\n  key_file: key.pem\n");
    assert!(
        err.contains("`tls_server_config.cert_file` holds no certificate"),
        "{err}"
    );
    let err = error("tls_server_config:\n  cert_file: cert.pem\n  key_file: cert.pem\n");
    assert!(err.contains("`tls_server_config.key_file`"), "{err}");
}

#[test]
fn http_server_config_is_checked() {
    let err = error("http_server_config:\n  http2: true\n");
    assert!(err.contains("`http_server_config.http2`"), "{err}");
    let err = error("http_server_config:\n  headers:\n    Server: x\n");
    assert!(
        err.contains("`http_server_config.headers.Server` is not allowed"),
        "{err}"
    );
}

#[test]
fn bad_password_hashes_name_the_user() {
    let err = error("basic_auth_users:\n  alice: secret\n");
    assert!(
        err.contains("`basic_auth_users.alice` is not a bcrypt hash"),
        "{err}"
    );
}

#[test]
fn a_missing_file_is_an_error_naming_it() {
    let err = WebConfig::load(Path::new("/nonexistent/web.yml"))
        .err()
        .unwrap()
        .to_string();
    assert!(err.contains("/nonexistent/web.yml"), "{err}");
}
