//! Asks the fleet's Prometheus (its HTTP API: instant queries) and the
//! culprits' own daemons (`/api/v1/status`), with the basic auth and TLS a
//! fleet needs.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use base64::Engine;
use serde::Deserialize;
use ureq::Agent;
use ureq::tls::{Certificate, ClientCert, PrivateKey, RootCerts, TlsConfig};

use super::model::{Answers, Culprit, Sample};

/// How to reach the fleet's Prometheus and its daemons.
pub struct Client {
    agent: Agent,
    prometheus: String,
    /// `Authorization` header for Prometheus.
    auth: Option<String>,
    daemon_scheme: String,
    daemon_port: u16,
}

/// What may go wrong, in words that name the file, URL or answer.
pub type Error = String;

#[derive(Deserialize)]
struct Response {
    status: String,
    #[serde(default)]
    error: Option<String>,
    #[serde(default)]
    data: Option<Data>,
}

#[derive(Deserialize)]
struct Data {
    #[serde(rename = "resultType")]
    result_type: String,
    result: Vec<Series>,
}

#[derive(Deserialize)]
struct Series {
    metric: BTreeMap<String, String>,
    value: (f64, String),
}

fn read_pem(path: &Path, what: &str) -> Result<Vec<u8>, Error> {
    std::fs::read(path).map_err(|e| format!("cannot read {what} {}: {e}", path.display()))
}

/// Settings for [`Client::new`].
pub struct Settings<'a> {
    pub prometheus: &'a str,
    pub user: Option<&'a str>,
    pub password_file: Option<&'a Path>,
    pub ca_file: Option<&'a Path>,
    pub cert_file: Option<&'a Path>,
    pub key_file: Option<&'a Path>,
    pub daemon_scheme: &'a str,
    pub daemon_port: u16,
    pub timeout: Duration,
}

impl Client {
    pub fn new(s: &Settings) -> Result<Client, Error> {
        let url = s.prometheus.trim_end_matches('/');
        if !(url.starts_with("http://") || url.starts_with("https://")) {
            return Err(format!(
                "--prometheus {url}: give an http:// or https:// URL"
            ));
        }
        let mut tls = TlsConfig::builder();
        if let Some(path) = s.ca_file {
            let pem = read_pem(path, "CA file")?;
            let certs: Vec<Certificate<'static>> = ureq::tls::parse_pem(&pem)
                .filter_map(|item| match item {
                    Ok(ureq::tls::PemItem::Certificate(c)) => Some(c),
                    _ => None,
                })
                .collect();
            if certs.is_empty() {
                return Err(format!(
                    "CA file {}: no PEM certificate in it",
                    path.display()
                ));
            }
            tls = tls.root_certs(RootCerts::new_with_certs(&certs));
        }
        match (s.cert_file, s.key_file) {
            (Some(cert), Some(key)) => {
                let chain_pem = read_pem(cert, "client certificate")?;
                let chain: Vec<Certificate<'static>> = ureq::tls::parse_pem(&chain_pem)
                    .filter_map(|item| match item {
                        Ok(ureq::tls::PemItem::Certificate(c)) => Some(c),
                        _ => None,
                    })
                    .collect();
                let key_pem = read_pem(key, "client key")?;
                let key = PrivateKey::from_pem(&key_pem)
                    .map_err(|e| format!("client key {}: {e}", key.display()))?;
                tls = tls.client_cert(Some(ClientCert::new_with_certs(&chain, key)));
            }
            (None, None) => {}
            _ => return Err("--cert-file and --key-file go together".into()),
        }
        let auth = match (s.user, s.password_file) {
            (Some(user), Some(file)) => {
                let password = std::fs::read_to_string(file)
                    .map_err(|e| format!("cannot read password file {}: {e}", file.display()))?;
                let token = base64::engine::general_purpose::STANDARD.encode(format!(
                    "{user}:{}",
                    password.trim_end_matches(['\n', '\r'])
                ));
                Some(format!("Basic {token}"))
            }
            (None, None) => None,
            _ => return Err("--user and --password-file go together".into()),
        };
        let agent = Agent::config_builder()
            .tls_config(tls.build())
            .timeout_global(Some(s.timeout))
            .http_status_as_error(false)
            .build()
            .new_agent();
        Ok(Client {
            agent,
            prometheus: url.to_owned(),
            auth,
            daemon_scheme: s.daemon_scheme.to_owned(),
            daemon_port: s.daemon_port,
        })
    }

    /// An instant query's samples.
    pub fn query(&self, promql: &str) -> Result<Vec<Sample>, Error> {
        let endpoint = format!("{}/api/v1/query", self.prometheus);
        let mut request = self.agent.get(&endpoint).query("query", promql);
        if let Some(auth) = &self.auth {
            request = request.header("Authorization", auth);
        }
        let mut response = request
            .call()
            .map_err(|e| format!("cannot query {endpoint}: {e}"))?;
        let status = response.status();
        let body: Response = response
            .body_mut()
            .with_config()
            .limit(64 << 20)
            .read_json()
            .map_err(|e| format!("{endpoint} answered {status} with no Prometheus answer: {e}"))?;
        if body.status != "success" {
            return Err(format!(
                "{endpoint} refused `{promql}`: {}",
                body.error.unwrap_or_else(|| status.to_string())
            ));
        }
        let data = body
            .data
            .ok_or_else(|| format!("{endpoint}: an answer without data"))?;
        if data.result_type != "vector" {
            return Err(format!(
                "{endpoint}: `{promql}` gave a {}, not a vector",
                data.result_type
            ));
        }
        Ok(data
            .result
            .into_iter()
            .filter_map(|s| {
                let value: f64 = s.value.1.parse().ok()?;
                Some(Sample {
                    labels: s.metric,
                    value,
                })
            })
            .collect())
    }

    /// Everything `stallwatch fleet` shows, for `run` or every run.
    pub fn answers(&self, run: Option<&str>) -> Result<Answers, Error> {
        let sel = run.map_or(String::new(), |r| format!("run={}", promql_string(r)));
        let braces = |extra: &str| {
            let all: Vec<&str> = [sel.as_str(), extra]
                .into_iter()
                .filter(|s| !s.is_empty())
                .collect();
            format!("{{{}}}", all.join(","))
        };
        Ok(Answers {
            utilization: self.query(&format!(
                "instance_gpu_run_rank:stallwatch_gpu_utilization:avg2m{}",
                braces("")
            ))?,
            work: self.query(&format!(
                "instance_gpu_run_rank:stallwatch_gpu_work:avg2m{}",
                braces("")
            ))?,
            kinds: self.query(&format!(
                "instance_gpu_run_rank:stallwatch_gpu_stall_active:max{}",
                braces("")
            ))?,
            world_size: self.query(&format!("run:stallwatch_world_size:max{}", braces("")))?,
            alerts: self.query(&format!(
                "ALERTS_FOR_STATE{} and ignoring (alertstate) ALERTS{}",
                braces(r#"alertname=~"StallwatchRun.+""#),
                braces(r#"alertname=~"StallwatchRun.+",alertstate="firing""#)
            ))?,
        })
    }

    /// GPU-hours the run has held back since `since` (seconds since the epoch).
    pub fn lost_gpu_hours(&self, run: &str, since: f64, now: f64) -> Result<Option<f64>, Error> {
        let window = (now - since).clamp(60.0, 30.0 * 86_400.0);
        let samples = self.query(&format!(
            "avg_over_time(run:stallwatch_gpus_held_back:count{{run={}}}[{}s])",
            promql_string(run),
            window.round() as u64
        ))?;
        Ok(samples.first().map(|s| s.value * window / 3600.0))
    }

    /// The culprit's own finding on its host: the hint and the stacks'
    /// summary of its GPU's active findings.
    pub fn host_evidence(&self, c: &mut Culprit) {
        let url = format!(
            "{}://{}:{}/api/v1/status",
            self.daemon_scheme,
            host_of(&c.instance),
            self.daemon_port
        );
        let status: serde_json::Value = match self
            .agent
            .get(&url)
            .call()
            .map_err(|e| e.to_string())
            .and_then(|mut r| {
                if r.status() != 200 {
                    return Err(format!("answered {}", r.status()));
                }
                r.body_mut()
                    .with_config()
                    .limit(16 << 20)
                    .read_json()
                    .map_err(|e| e.to_string())
            }) {
            Ok(v) => v,
            Err(e) => {
                c.host_error = Some(format!("{url}: {e}"));
                return;
            }
        };
        let gpu =
            status["gpus"].as_array().into_iter().flatten().find(|g| {
                g["gpu"].as_u64().map(|n| n.to_string()).as_deref() == Some(c.gpu.as_str())
            });
        let Some(gpu) = gpu else {
            c.host_error = Some(format!("{url}: no GPU {} there", c.gpu));
            return;
        };
        let findings: Vec<&serde_json::Value> =
            gpu["active"].as_array().into_iter().flatten().collect();
        let first_kind = c.kind.split(", ").next().unwrap_or("");
        let finding = findings
            .iter()
            .find(|f| f["kind"].as_str() == Some(first_kind))
            .or(findings.first());
        if let Some(f) = finding {
            c.hint = f["hint"].as_str().map(str::to_owned);
        }
        // A rank gone from its GPU carries no run label there any more: its
        // GPU's own findings (an Xid 79, say) are the kinds.
        if c.gone && c.kind == "none" && !findings.is_empty() {
            let kinds: Vec<&str> = findings.iter().filter_map(|f| f["kind"].as_str()).collect();
            c.kind = kinds.join(", ");
        }
        c.stacks = findings
            .iter()
            .find_map(|f| f["evidence"]["stacks"]["summary"].as_str())
            .map(str::to_owned);
    }
}

/// The host part of an `instance` label (`gpu-node-1`, `gpu-node-1:9847`, `[::1]:9847`).
fn host_of(instance: &str) -> &str {
    if let Some(rest) = instance.strip_prefix('[') {
        return rest.split(']').next().unwrap_or(rest);
    }
    match instance.rsplit_once(':') {
        Some((host, port)) if port.chars().all(|c| c.is_ascii_digit()) && !host.contains(':') => {
            host
        }
        _ => instance,
    }
}

/// A PromQL string literal.
fn promql_string(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn instances_and_strings() {
        assert_eq!(host_of("gpu-node-1"), "gpu-node-1");
        assert_eq!(host_of("gpu-node-1:9847"), "gpu-node-1");
        assert_eq!(host_of("[::1]:9847"), "::1");
        assert_eq!(host_of("fe80::1"), "fe80::1");
        assert_eq!(promql_string(r#"a"b\c"#), r#""a\"b\\c""#);
    }
}
