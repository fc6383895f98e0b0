//! What each open connection is doing, for its timeouts and for making room
//! when every connection slot is taken.
//!
//! A connection is reading a request head from the moment it is accepted and
//! from the first byte of each later request (the header read timeout runs),
//! busy from a request's dispatch until its response body is handed to
//! hyper (the request timeout runs), and idle in between (the idle timeout
//! runs). A write the client does not take (a client that stopped reading)
//! may also wait no longer than the request timeout.

use std::collections::HashMap;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::Notify;
use tokio::time::Instant;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    Head,
    Busy,
    Idle,
    /// Closed to make room for a waiting connection.
    Evicted,
}

pub struct Activity {
    state: Mutex<State>,
    changed: Notify,
}

struct State {
    phase: Phase,
    since: Instant,
    busy: usize,
    /// Since when a write has waited for the client to read.
    write_blocked: Option<Instant>,
}

/// The timeouts of [`Activity::deadline`].
#[derive(Debug, Clone, Copy)]
pub struct Timeouts {
    pub header_read: Duration,
    pub idle: Duration,
    pub request: Duration,
}

impl Activity {
    fn new() -> Activity {
        Activity {
            state: Mutex::new(State {
                phase: Phase::Head,
                since: Instant::now(),
                busy: 0,
                write_blocked: None,
            }),
            changed: Notify::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn set(&self, state: &mut State, phase: Phase) {
        state.phase = phase;
        state.since = Instant::now();
        self.changed.notify_one();
    }

    pub fn phase(&self) -> Phase {
        self.lock().phase
    }

    /// When the connection runs out of time, the phase it is in, and
    /// whether a blocked write is what runs out first.
    pub fn deadline(&self, t: &Timeouts) -> (Phase, Instant, bool) {
        let s = self.lock();
        let limit = match s.phase {
            Phase::Head => t.header_read,
            Phase::Busy => t.request,
            Phase::Idle => t.idle,
            Phase::Evicted => Duration::ZERO,
        };
        let phase_end = s.since + limit;
        match s.write_blocked {
            Some(blocked) if blocked + t.request < phase_end => {
                (s.phase, blocked + t.request, true)
            }
            _ => (s.phase, phase_end, false),
        }
    }

    /// Resolves after the phase changed (or was changed before the call).
    pub async fn changed(&self) {
        self.changed.notified().await
    }

    /// A request was dispatched; it is done when the guard drops.
    pub fn begin(self: &Arc<Self>) -> BusyGuard {
        let mut s = self.lock();
        s.busy += 1;
        if s.phase != Phase::Evicted {
            self.set(&mut s, Phase::Busy);
        }
        BusyGuard(self.clone())
    }

    fn bytes_read(&self) {
        let mut s = self.lock();
        if s.phase == Phase::Idle {
            self.set(&mut s, Phase::Head);
        }
    }

    fn write_result<T>(&self, result: &Poll<T>) {
        let mut s = self.lock();
        match (result.is_pending(), s.write_blocked.is_some()) {
            (true, false) => {
                s.write_blocked = Some(Instant::now());
                self.changed.notify_one();
            }
            (false, true) => s.write_blocked = None,
            _ => {}
        }
    }

    /// Marks the connection for closing unless a request is in progress.
    fn evict(&self) -> Option<Instant> {
        let mut s = self.lock();
        match s.phase {
            Phase::Head | Phase::Idle => {
                let since = s.since;
                self.set(&mut s, Phase::Evicted);
                Some(since)
            }
            Phase::Busy | Phase::Evicted => None,
        }
    }
}

pub struct BusyGuard(Arc<Activity>);

impl Drop for BusyGuard {
    fn drop(&mut self) {
        let mut s = self.0.lock();
        s.busy -= 1;
        if s.busy == 0 && s.phase == Phase::Busy {
            self.0.set(&mut s, Phase::Idle);
        }
    }
}

/// Every open connection's activity.
#[derive(Default)]
pub struct Registry {
    next: AtomicU64,
    conns: Mutex<HashMap<u64, Arc<Activity>>>,
}

impl Registry {
    fn lock(&self) -> MutexGuard<'_, HashMap<u64, Arc<Activity>>> {
        self.conns.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Registers a new connection (reading its first request head).
    pub fn add(self: &Arc<Self>) -> Entry {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let activity = Arc::new(Activity::new());
        self.lock().insert(id, activity.clone());
        Entry {
            id,
            registry: self.clone(),
            activity,
        }
    }

    /// Closes the connection that has waited longest without a request in
    /// progress; false when every connection is busy.
    pub fn evict_longest_waiting(&self) -> bool {
        let conns = self.lock();
        let oldest = conns
            .values()
            .filter(|a| matches!(a.phase(), Phase::Head | Phase::Idle))
            .min_by_key(|a| a.lock().since);
        oldest.is_some_and(|a| a.evict().is_some())
    }
}

/// A connection's place in the registry, removed on drop.
pub struct Entry {
    id: u64,
    registry: Arc<Registry>,
    pub activity: Arc<Activity>,
}

impl Drop for Entry {
    fn drop(&mut self) {
        self.registry.lock().remove(&self.id);
    }
}

/// A connection's stream that turns an idle connection into one reading a
/// request head when bytes arrive.
pub struct Watched<T> {
    inner: T,
    activity: Arc<Activity>,
}

impl<T> Watched<T> {
    pub fn new(inner: T, activity: Arc<Activity>) -> Self {
        Watched { inner, activity }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Watched<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let result = Pin::new(&mut self.inner).poll_read(cx, buf);
        if matches!(result, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.activity.bytes_read();
        }
        result
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Watched<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let result = Pin::new(&mut self.inner).poll_write(cx, buf);
        self.activity.write_result(&result);
        result
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let result = Pin::new(&mut self.inner).poll_flush(cx);
        self.activity.write_result(&result);
        result
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let result = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        self.activity.write_result(&result);
        result
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

#[cfg(test)]
mod tests;
