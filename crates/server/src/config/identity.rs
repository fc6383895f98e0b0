//! `[identity]` (whose a job is, and what of it is shown) and `[kubernetes]`
//! (where the kubelet's PodResources socket is, and how it is asked).

use std::path::PathBuf;
use std::time::Duration;

use collector::CollectError;
use collector::collector::Collector;
use collector::identity::kubelet::{CallLimits, KubeletOptions};
use collector::identity::user::{UserLabel, UserOptions};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct IdentityConfig {
    /// What the `user` label and the status show of a job's user: `name`
    /// (its name in `passwd_file`, the uid when the file has none), `uid`
    /// (the number only) or `none`.
    pub user_label: UserLabel,
    /// The host's user database, for the names.
    pub passwd_file: PathBuf,
}

impl Default for IdentityConfig {
    fn default() -> Self {
        let users = UserOptions::default();
        IdentityConfig {
            user_label: users.label,
            passwd_file: users.passwd_file,
        }
    }
}

impl IdentityConfig {
    pub fn validate(&self) -> Result<(), (&'static str, &'static str)> {
        if self.user_label == UserLabel::Name && self.passwd_file.as_os_str().is_empty() {
            return Err((
                "identity.passwd_file",
                "must not be empty while identity.user_label is \"name\"",
            ));
        }
        Ok(())
    }

    pub fn options(&self) -> UserOptions {
        UserOptions {
            label: self.user_label,
            passwd_file: self.passwd_file.clone(),
        }
    }

    /// `collector`, reading and showing users as set here.
    pub fn apply(&self, collector: Collector) -> Collector {
        collector.with_users(self.options())
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct KubernetesConfig {
    /// The kubelet's PodResources socket; empty asks no kubelet.
    pub pod_resources_socket: PathBuf,
    /// Time between two `List` calls.
    #[serde(with = "humantime_serde")]
    pub refresh: Duration,
    /// Longest a connection, and then a call, may take.
    #[serde(with = "humantime_serde")]
    pub timeout: Duration,
    /// Largest answer read, in bytes.
    pub max_response_bytes: usize,
}

impl Default for KubernetesConfig {
    fn default() -> Self {
        KubernetesConfig {
            pod_resources_socket: PathBuf::from("/var/lib/kubelet/pod-resources/kubelet.sock"),
            refresh: Duration::from_secs(15),
            timeout: Duration::from_secs(2),
            max_response_bytes: 4 << 20,
        }
    }
}

impl KubernetesConfig {
    pub fn validate(&self) -> Result<(), (&'static str, &'static str)> {
        if self.refresh < Duration::from_secs(1) || self.refresh > Duration::from_secs(600) {
            return Err(("kubernetes.refresh", "must be between 1s and 10m"));
        }
        if self.timeout < Duration::from_millis(100) || self.timeout >= self.refresh {
            return Err((
                "kubernetes.timeout",
                "must be at least 100ms and shorter than kubernetes.refresh",
            ));
        }
        if !(64 << 10..=64 << 20).contains(&self.max_response_bytes) {
            return Err((
                "kubernetes.max_response_bytes",
                "must be between 65536 and 67108864",
            ));
        }
        Ok(())
    }

    /// How the kubelet is asked; `None` when no socket is set.
    pub fn options(&self) -> Option<KubeletOptions> {
        (!self.pod_resources_socket.as_os_str().is_empty()).then(|| KubeletOptions {
            socket: self.pod_resources_socket.clone(),
            refresh: self.refresh,
            limits: CallLimits {
                timeout: self.timeout,
                max_bytes: self.max_response_bytes,
            },
        })
    }

    /// `collector`, asking the kubelet when a socket is set.
    pub fn apply(&self, collector: Collector) -> Result<Collector, CollectError> {
        match self.options() {
            Some(options) => collector.with_kubelet(options),
            None => Ok(collector),
        }
    }
}
