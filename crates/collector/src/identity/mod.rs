//! Who a process is: where it runs and whose it is.
//!
//! - `cgroup`: its container, Kubernetes pod UID, systemd unit, Slurm job and
//!   step, from `/proc/<pid>/cgroup`.
//! - `user`: its user, from the uid in `/proc/<pid>/status` and the host's
//!   user database.
//! - `rank`: the distributed run it belongs to and its rank in it, from the
//!   launcher's variables in `/proc/<pid>/environ`.
//! - `kubelet`: the pod's namespace, name and container, from the kubelet's
//!   PodResources socket, on a thread of its own.
//! - `per_process`: what `user` and `rank` keep per job leader (pid and
//!   start time).
//!
//! `proc` reads these for each job as it reads the job.

pub(crate) mod cgroup;
pub mod kubelet;
mod per_process;
pub mod rank;
pub mod user;

pub use cgroup::parse_attribution;
