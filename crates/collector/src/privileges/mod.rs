//! What the daemon may read, said once: Yama's `ptrace_scope`, its
//! capabilities, its AppArmor or SELinux label, its user and PID
//! namespaces, and from these whether other users' jobs' stacks and
//! environments can be read, and why (`report.rs`, pure, over the texts
//! `parse.rs` understands); `read.rs` reads them from a procfs mount.

mod parse;
mod read;
mod report;

pub use parse::Label;
pub use read::{environ_refused, facts, job, read, sys_beside};
pub use report::{
    AppArmor, Capabilities, Conclusion, Facts, Job, Privileges, Reach, SeLinux, environ_refusal,
    refusal,
};
