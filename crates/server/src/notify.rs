//! systemd notifications; `sd_notify` does nothing unless `NOTIFY_SOCKET` is set.

use sd_notify::NotifyState;

fn send(state: &[NotifyState]) {
    if let Err(e) = sd_notify::notify(state) {
        tracing::warn!(error = %e, "cannot notify systemd");
    }
}

pub fn ready() {
    send(&[NotifyState::Ready]);
}

pub fn stopping() {
    send(&[NotifyState::Stopping]);
}

/// Called once per sample, so a wedged sampling loop stops the pings and
/// systemd restarts the service.
pub fn watchdog() {
    send(&[NotifyState::Watchdog]);
}
