//! Builds the rustls server configuration from `tls_server_config`, with the
//! names and defaults of exporter-toolkit (Go's `crypto/tls` names).

use std::path::Path;
use std::sync::Arc;

use rustls::crypto::{CryptoProvider, SupportedKxGroup, ring};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig, SupportedCipherSuite, SupportedProtocolVersion};

use crate::http::web_config_file::{KeyError, TlsServerConfig};

const KEY: &str = "tls_server_config";

fn key(name: &str) -> String {
    format!("{KEY}.{name}")
}

pub fn server_config(t: &TlsServerConfig, dir: &Path) -> Result<ServerConfig, KeyError> {
    if !t.client_allowed_sans.is_empty() {
        return Err(KeyError::new(
            key("client_allowed_sans"),
            "is not supported; leave it out (client certificates are checked against client_ca_file)",
        ));
    }
    let client_auth = client_auth(t.client_auth_type.as_str())?;
    let versions = versions(&t.min_version, &t.max_version)?;
    let provider = Arc::new(CryptoProvider {
        cipher_suites: cipher_suites(&t.cipher_suites)?,
        kx_groups: kx_groups(&t.curve_preferences)?,
        ..ring::default_provider()
    });
    let certs = certificates(t, dir)?;
    let private_key = private_key(t, dir)?;
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&versions)
        .map_err(|e| KeyError::new(key("cipher_suites"), e.to_string()))?;
    let builder = match client_auth {
        ClientAuth::None => {
            if !t.client_ca_file.is_empty() || !t.client_ca.is_empty() {
                return Err(KeyError::new(
                    key("client_auth_type"),
                    "must be RequireAndVerifyClientCert or VerifyClientCertIfGiven when a client CA is given",
                ));
            }
            builder.with_no_client_auth()
        }
        mode => {
            let roots = client_roots(t, dir)?;
            let verifier = WebPkiClientVerifier::builder_with_provider(roots, provider);
            let verifier = match mode {
                ClientAuth::IfGiven => verifier.allow_unauthenticated(),
                _ => verifier,
            };
            let verifier = verifier
                .build()
                .map_err(|e| KeyError::new(key("client_ca_file"), e.to_string()))?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let mut config = builder
        .with_single_cert(certs, private_key)
        .map_err(|e| KeyError::new(key("key_file"), format!("does not fit cert_file: {e}")))?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    config.ignore_client_order = t.prefer_server_cipher_suites.unwrap_or(true);
    Ok(config)
}

/// PEM text from `inline` or from the file `file` (relative to `dir`).
fn pem(
    file: &str,
    inline: &str,
    file_key: &str,
    inline_key: &str,
    dir: &Path,
) -> Result<Vec<u8>, KeyError> {
    match (file.is_empty(), inline.is_empty()) {
        (false, false) => Err(KeyError::new(
            key(inline_key),
            format!("and {file_key} are both set; give one of them"),
        )),
        (true, true) => Err(KeyError::new(key(file_key), "is required")),
        (true, false) => Ok(inline.as_bytes().to_vec()),
        (false, true) => {
            let path = dir.join(file);
            std::fs::read(&path).map_err(|e| {
                KeyError::new(
                    key(file_key),
                    format!("cannot read {}: {e}", path.display()),
                )
            })
        }
    }
}

fn certificates(t: &TlsServerConfig, dir: &Path) -> Result<Vec<CertificateDer<'static>>, KeyError> {
    let pem = pem(&t.cert_file, &t.cert, "cert_file", "cert", dir)?;
    let certs = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| KeyError::new(key("cert_file"), format!("is not PEM: {e}")))?;
    if certs.is_empty() {
        return Err(KeyError::new(key("cert_file"), "holds no certificate"));
    }
    Ok(certs)
}

fn private_key(t: &TlsServerConfig, dir: &Path) -> Result<PrivateKeyDer<'static>, KeyError> {
    let pem = pem(&t.key_file, &t.key, "key_file", "key", dir)?;
    PrivateKeyDer::from_pem_slice(&pem)
        .map_err(|e| KeyError::new(key("key_file"), format!("holds no private key: {e}")))
}

fn client_roots(t: &TlsServerConfig, dir: &Path) -> Result<Arc<RootCertStore>, KeyError> {
    let pem = pem(
        &t.client_ca_file,
        &t.client_ca,
        "client_ca_file",
        "client_ca",
        dir,
    )?;
    let mut roots = RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(&pem) {
        let cert =
            cert.map_err(|e| KeyError::new(key("client_ca_file"), format!("is not PEM: {e}")))?;
        roots
            .add(cert)
            .map_err(|e| KeyError::new(key("client_ca_file"), e.to_string()))?;
    }
    if roots.is_empty() {
        return Err(KeyError::new(key("client_ca_file"), "holds no certificate"));
    }
    Ok(Arc::new(roots))
}

#[derive(Clone, Copy, PartialEq)]
enum ClientAuth {
    None,
    IfGiven,
    Required,
}

fn client_auth(value: &str) -> Result<ClientAuth, KeyError> {
    match value {
        "" | "NoClientCert" => Ok(ClientAuth::None),
        "VerifyClientCertIfGiven" => Ok(ClientAuth::IfGiven),
        "RequireAndVerifyClientCert" => Ok(ClientAuth::Required),
        "RequestClientCert" | "RequireAnyClientCert" => Err(KeyError::new(
            key("client_auth_type"),
            format!(
                "{value} (client certificates without verification) is not supported; \
                 use RequireAndVerifyClientCert or VerifyClientCertIfGiven"
            ),
        )),
        other => Err(KeyError::new(
            key("client_auth_type"),
            format!(
                "{other:?} is not one of NoClientCert, VerifyClientCertIfGiven, \
                 RequireAndVerifyClientCert"
            ),
        )),
    }
}

fn version(value: &str, name: &str) -> Result<u8, KeyError> {
    match value {
        "TLS12" => Ok(12),
        "TLS13" => Ok(13),
        "TLS10" | "TLS11" => Err(KeyError::new(
            key(name),
            format!("{value} is not supported (TLS 1.0 and 1.1 are insecure); use TLS12 or TLS13"),
        )),
        other => Err(KeyError::new(
            key(name),
            format!("{other:?} is not one of TLS12, TLS13"),
        )),
    }
}

fn versions(min: &str, max: &str) -> Result<Vec<&'static SupportedProtocolVersion>, KeyError> {
    let min = if min.is_empty() {
        12
    } else {
        version(min, "min_version")?
    };
    let max = if max.is_empty() {
        13
    } else {
        version(max, "max_version")?
    };
    if min > max {
        return Err(KeyError::new(
            key("max_version"),
            "is lower than min_version",
        ));
    }
    let mut out = Vec::new();
    if min <= 12 {
        out.push(&rustls::version::TLS12);
    }
    if max >= 13 {
        out.push(&rustls::version::TLS13);
    }
    Ok(out)
}

/// TLS 1.2 suites by their IANA (and Go) names; like Go, the list does not
/// apply to TLS 1.3, whose suites are always offered.
fn cipher_suites(names: &[String]) -> Result<Vec<SupportedCipherSuite>, KeyError> {
    let all = ring::ALL_CIPHER_SUITES;
    if names.is_empty() {
        return Ok(all.to_vec());
    }
    let mut out: Vec<SupportedCipherSuite> = all
        .iter()
        .filter(|s| s.tls13().is_some())
        .copied()
        .collect();
    for name in names {
        // Go also accepts the ChaCha20 names without the `_SHA256` suffix.
        let found = all.iter().find(|s| {
            let iana = format!("{:?}", s.suite());
            s.tls13().is_none() && (iana == *name || iana == format!("{name}_SHA256"))
        });
        match found {
            Some(s) => out.push(*s),
            None => {
                let supported: Vec<String> = all
                    .iter()
                    .filter(|s| s.tls13().is_none())
                    .map(|s| format!("{:?}", s.suite()))
                    .collect();
                return Err(KeyError::new(
                    key("cipher_suites"),
                    format!(
                        "{name:?} is not supported (supported: {})",
                        supported.join(", ")
                    ),
                ));
            }
        }
    }
    Ok(out)
}

fn kx_groups(names: &[String]) -> Result<Vec<&'static dyn SupportedKxGroup>, KeyError> {
    if names.is_empty() {
        return Ok(ring::ALL_KX_GROUPS.to_vec());
    }
    names
        .iter()
        .map(|name| match name.as_str() {
            "X25519" => Ok(ring::kx_group::X25519),
            "CurveP256" => Ok(ring::kx_group::SECP256R1),
            "CurveP384" => Ok(ring::kx_group::SECP384R1),
            other => Err(KeyError::new(
                key("curve_preferences"),
                format!("{other:?} is not supported (supported: X25519, CurveP256, CurveP384)"),
            )),
        })
        .collect()
}
