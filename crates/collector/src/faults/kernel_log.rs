//! Following the kernel log for the driver's Xid lines, on a thread of its own.
//!
//! `/dev/kmsg` is read with blocking reads, one record per read, from its end
//! (the records at start are history, not news); `EPIPE` means records were
//! overwritten before they were read, and reading goes on. A regular file or
//! a FIFO at the configured path (what tests feed) is read without blocking,
//! as lines, looking again every `POLL` when there is nothing new.
//!
//! Opening `/dev/kmsg` needs `CAP_SYSLOG` where `kernel.dmesg_restrict=1`;
//! without it the daemon goes on with NVML events alone and tries again
//! every `REOPEN`.

use std::fs::{File, OpenOptions};
use std::io::{ErrorKind, Read, Seek, SeekFrom};
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::mpsc::Sender;
use std::time::Duration;

use super::kmsg::{MAX_LINE, parse_line};
use super::report::{GpuRef, XidReport};
use crate::meter::{Meter, Work};
use crate::sample::faults::FaultSource;
use crate::time::unix_seconds;

const POLL: Duration = Duration::from_millis(250);
const REOPEN: Duration = Duration::from_secs(60);
const EPIPE: i32 = 32;

pub fn run(path: PathBuf, tx: Sender<XidReport>, state: Arc<AtomicU8>, meter: Meter) {
    let mut logged_failure: Option<String> = None;
    loop {
        match open(&path) {
            Ok(file) => {
                state.store(1, Ordering::Relaxed);
                if logged_failure.take().is_some() {
                    tracing::info!(path = %path.display(), "kernel log readable again");
                }
                tracing::debug!(path = %path.display(), "following the kernel log for Xid errors");
                if follow(file, &tx, meter).is_err() {
                    return; // the sampler is gone
                }
            }
            Err(err) => {
                state.store(2, Ordering::Relaxed);
                let message = err.to_string();
                if logged_failure.as_deref() != Some(&message) {
                    tracing::warn!(
                        path = %path.display(),
                        error = %message,
                        "cannot read the kernel log; Xid errors come from NVML events only, \
                         without the process that caused them (reading /dev/kmsg needs \
                         CAP_SYSLOG where kernel.dmesg_restrict=1)"
                    );
                    logged_failure = Some(message);
                }
            }
        }
        std::thread::sleep(REOPEN);
    }
}

/// Opens the log at its end. A character device (`/dev/kmsg`) is reopened
/// for blocking reads; anything else stays non-blocking (a FIFO without a
/// writer would block the open).
fn open(path: &Path) -> std::io::Result<File> {
    let nonblocking = rustix::fs::OFlags::NONBLOCK.bits() as i32;
    let mut file = OpenOptions::new()
        .read(true)
        .custom_flags(nonblocking)
        .open(path)?;
    if file.metadata()?.file_type().is_char_device() {
        file = File::open(path)?;
    }
    // A FIFO cannot seek; it has no history either.
    let _ = file.seek(SeekFrom::End(0));
    Ok(file)
}

/// Reads until an error that needs a reopen (`Ok`), or until the receiver
/// is gone (`Err`).
fn follow(mut file: File, tx: &Sender<XidReport>, meter: Meter) -> Result<(), ()> {
    let mut buf = vec![0u8; 16 * 1024];
    let mut lines = Lines::default();
    loop {
        meter.finished(Work::Faults);
        match file.read(&mut buf) {
            Ok(0) => std::thread::sleep(POLL),
            Ok(n) => {
                for line in lines.feed(&buf[..n]) {
                    if let Some(x) = parse_line(&line) {
                        let report = XidReport {
                            at_seconds: unix_seconds(std::time::SystemTime::now()),
                            gpu: GpuRef::Pci(x.pci),
                            xid: x.xid,
                            source: FaultSource::KernelLog,
                            pid: x.pid,
                            comm: x.comm,
                            detail: x.detail,
                        };
                        tx.send(report).map_err(|_| ())?;
                    }
                }
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => std::thread::sleep(POLL),
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            // Records overwritten before they were read: go on with the next.
            Err(e) if e.raw_os_error() == Some(EPIPE) => {}
            Err(e) => {
                tracing::warn!(error = %e, "reading the kernel log failed; reopening it");
                return Ok(());
            }
        }
    }
}

/// Splits bytes into lines; a line longer than `MAX_LINE` is dropped whole.
#[derive(Default)]
pub struct Lines {
    partial: Vec<u8>,
    skipping: bool,
}

impl Lines {
    pub fn feed(&mut self, mut bytes: &[u8]) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        while let Some(end) = bytes.iter().position(|b| *b == b'\n') {
            if !self.skipping && self.partial.len() + end <= MAX_LINE {
                let mut line = std::mem::take(&mut self.partial);
                line.extend_from_slice(&bytes[..end]);
                out.push(line);
            }
            self.partial.clear();
            self.skipping = false;
            bytes = &bytes[end + 1..];
        }
        if !self.skipping {
            if self.partial.len() + bytes.len() > MAX_LINE {
                self.partial.clear();
                self.skipping = true;
            } else {
                self.partial.extend_from_slice(bytes);
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_across_reads_and_overlong_ones() {
        let mut l = Lines::default();
        assert!(l.feed(b"ab").is_empty());
        assert_eq!(l.feed(b"c\nd\n"), vec![b"abc".to_vec(), b"d".to_vec()]);
        let long = vec![b'x'; MAX_LINE + 10];
        assert!(l.feed(&long).is_empty());
        assert!(l.feed(b"yyy").is_empty());
        assert_eq!(l.feed(b"\nok\n"), vec![b"ok".to_vec()]);
        let mut long = vec![b'z'; MAX_LINE + 1];
        long.extend(b"\nfine\n");
        assert_eq!(l.feed(&long), vec![b"fine".to_vec()]);
    }
}
