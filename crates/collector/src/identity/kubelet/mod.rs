//! The kubelet's PodResources API: which pod and container each GPU was
//! given to, so that a job gets its `namespace`, `pod` and `container`.
//!
//! A thread of its own (`kubelet`) asks the socket every `refresh`, each
//! call bounded by `timeout` and `max_response_bytes`, and hands each answer
//! (or why there is none) down a channel of two; the sampler takes what is
//! there without waiting and matches jobs against the last answer
//! (`pods.rs`). A socket that is missing, hangs or answers garbage costs the
//! thread its timeout and the status an error, never a sample or a scrape.
//! An answer is used for `STALE_AFTER_REFRESHES` refreshes; after that jobs
//! keep their cgroup's pod UID only.

mod client;
mod pods;
pub mod proto;

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::mpsc::{Receiver, SyncSender, TryRecvError, TrySendError, sync_channel};
use std::time::Duration;

pub use client::CallLimits;
pub use pods::{Container, MAX_CONTAINERS, MAX_DEVICES, MAX_PODS, Pod, PodTable, attribute};

use crate::error::CollectError;
use crate::meter::{Meter, Work};
use crate::sample::kubernetes::{KubernetesState, PodSource};
use crate::sample::{GpuSample, JobSample};
use crate::time::unix_now;

/// How many refresh periods an answer is used for when later calls fail.
pub const STALE_AFTER_REFRESHES: u32 = 4;

/// Where the kubelet is and how it is asked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KubeletOptions {
    /// The PodResources socket (`/var/lib/kubelet/pod-resources/kubelet.sock`).
    pub socket: PathBuf,
    /// Time between two calls.
    pub refresh: Duration,
    pub limits: CallLimits,
}

/// One call's outcome.
struct Refresh {
    at: f64,
    answer: Result<PodTable, String>,
}

/// The sampler's side: the latest answer and the channel more come down.
pub struct Kubelet {
    options: KubeletOptions,
    updates: Receiver<Refresh>,
    /// The last answer and when it came.
    table: Option<(Arc<PodTable>, f64)>,
    /// The latest call's error.
    error: Option<String>,
}

impl Kubelet {
    /// Starts the `kubelet` thread. It ends once this is dropped (after its
    /// current call and wait).
    pub fn start(options: KubeletOptions, meter: Meter) -> Result<Self, CollectError> {
        let (tx, updates) = sync_channel(2);
        let thread = options.clone();
        std::thread::Builder::new()
            .name("kubelet".into())
            .spawn(move || refresh_loop(&thread, &tx, meter))
            .map_err(CollectError::Thread)?;
        Ok(Kubelet {
            options,
            updates,
            table: None,
            error: Some("the kubelet has not answered yet".into()),
        })
    }

    /// Takes the answers that came since the last sample (without waiting)
    /// and gives each job its pod; returns the state for the status.
    pub fn attribute(&mut self, gpus: &[GpuSample], jobs: &mut [JobSample]) -> KubernetesState {
        loop {
            match self.updates.try_recv() {
                Ok(Refresh {
                    answer: Ok(table),
                    at,
                }) => {
                    self.error = table.left_out.clone();
                    self.table = Some((Arc::new(table), at));
                }
                Ok(Refresh {
                    answer: Err(why), ..
                }) => self.error = Some(why),
                Err(TryRecvError::Empty) => break,
                Err(TryRecvError::Disconnected) => {
                    self.error = Some("the kubelet thread ended".into());
                    break;
                }
            }
        }
        let stale_after = self.options.refresh.as_secs_f64() * f64::from(STALE_AFTER_REFRESHES);
        let now = unix_now();
        if self.table.as_ref().is_some_and(|(_, at)| {
            now - at > stale_after + self.options.limits.timeout.as_secs_f64()
        }) {
            self.table = None;
        }
        let socket = self.options.socket.display().to_string();
        let why = format!(
            "the kubelet's pods are not known ({})",
            self.error.as_deref().unwrap_or("no answer yet")
        );
        attribute(
            self.table.as_ref().map(|(t, _)| t.as_ref()),
            &why,
            gpus,
            jobs,
        );
        KubernetesState {
            socket,
            source: if self.table.is_some() {
                PodSource::Kubelet
            } else {
                PodSource::Cgroup
            },
            last_refresh: self.table.as_ref().map(|(_, at)| *at),
            pods: self.table.as_ref().map_or(0, |(t, _)| t.pods.len() as u32),
            error: self.error.clone(),
        }
    }
}

/// The `kubelet` thread: a call, then a wait, until the sampler is gone.
fn refresh_loop(options: &KubeletOptions, tx: &SyncSender<Refresh>, meter: Meter) {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .enable_time()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            let _ = tx.try_send(Refresh {
                at: unix_now(),
                answer: Err(format!("cannot start the kubelet client ({e})")),
            });
            return;
        }
    };
    runtime.block_on(async {
        loop {
            let answer = client::list(&options.socket, &options.limits)
                .await
                .map(PodTable::from_answer);
            if let Err(why) = &answer {
                tracing::debug!(socket = %options.socket.display(), error = %why, "kubelet PodResources");
            }
            match tx.try_send(Refresh {
                at: unix_now(),
                answer,
            }) {
                Err(TrySendError::Disconnected(_)) => return,
                // The sampler has two answers it did not take yet.
                Err(TrySendError::Full(_)) | Ok(()) => {}
            }
            meter.finished(Work::Kubelet);
            tokio::time::sleep(options.refresh).await;
        }
    });
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::sample::Attribution;

    fn kubelet() -> (Kubelet, SyncSender<Refresh>) {
        let (tx, updates) = sync_channel(2);
        let options = KubeletOptions {
            socket: "/run/kubelet.sock".into(),
            refresh: Duration::from_secs(1),
            limits: CallLimits {
                timeout: Duration::from_millis(100),
                max_bytes: 1 << 20,
            },
        };
        let k = Kubelet {
            options,
            updates,
            table: None,
            error: None,
        };
        (k, tx)
    }

    fn pod_job() -> Vec<JobSample> {
        let json = r#"{"gpus":[0],"leader":{"id":{"pid":7,"start_ticks":1},"ppid":1,"comm":"x","state":"S","start_time_seconds":0,"cpu_seconds":0,"rss_bytes":0,"threads":[],"io":null},"descendants":[],"attribution":{},"stdout_bytes":null,"stderr_bytes":null,"output_modified_seconds":null}"#;
        let mut job: JobSample = serde_json::from_str(json).unwrap();
        job.attribution = Attribution {
            pod_uid: Some("uid-a".into()),
            ..Attribution::default()
        };
        vec![job]
    }

    #[test]
    fn an_old_answer_is_dropped_and_a_gone_thread_is_said() {
        let (mut k, tx) = kubelet();
        let table = PodTable::from_answer(proto::ListPodResourcesResponse {
            pod_resources: vec![],
        });
        tx.try_send(Refresh {
            at: unix_now(),
            answer: Ok(table.clone()),
        })
        .unwrap();
        let state = k.attribute(&[], &mut pod_job());
        assert_eq!((state.source, state.error), (PodSource::Kubelet, None));
        // Four refreshes (and a timeout) later without an answer: no pods.
        tx.try_send(Refresh {
            at: unix_now() - 10.0,
            answer: Ok(table),
        })
        .unwrap();
        let mut jobs = pod_job();
        let state = k.attribute(&[], &mut jobs);
        assert_eq!(state.source, PodSource::Cgroup);
        assert_eq!(state.last_refresh, None);
        assert!(jobs[0].attribution.pod_unknown.is_some());
        drop(tx);
        let mut jobs = pod_job();
        let state = k.attribute(&[], &mut jobs);
        assert_eq!(state.error.as_deref(), Some("the kubelet thread ended"));
        let why = jobs[0].attribution.pod_unknown.clone().unwrap();
        assert!(why.contains("the kubelet thread ended"), "{why}");
    }
}
