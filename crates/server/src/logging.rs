//! `tracing` set-up: text or JSON lines on stderr, level from `RUST_LOG`
//! (default `info`).
//!
//! Text lines are coloured only when stderr is a terminal and `NO_COLOR` is
//! unset (or empty). When stderr is the journal's stream (`JOURNAL_STREAM`
//! names its device and inode, as systemd sets it for a service), each line
//! starts with its syslog priority in the `<N>` form of sd-daemon(3), so that
//! `journalctl -p warning` finds the warnings. JSON lines are never prefixed.

use std::ffi::OsStr;
use std::fmt::{self, Write as _};
use std::io::IsTerminal;
use std::os::fd::AsFd;
use std::os::unix::fs::MetadataExt;

use tracing::{Event, Level, Subscriber};
use tracing_subscriber::EnvFilter;
use tracing_subscriber::fmt::format::{Format, Writer};
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields, MakeWriter};
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::util::SubscriberInitExt;

use crate::cli::LogFormat;

pub fn init(format: LogFormat) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    match format {
        LogFormat::Text => text_subscriber(TextStyle::detect(), filter, std::io::stderr).init(),
        LogFormat::Json => tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_writer(std::io::stderr)
            .json()
            .flatten_event(true)
            .init(),
    }
}

/// The text log subscriber writing to `writer` in `style`.
pub fn text_subscriber<W>(
    style: TextStyle,
    filter: EnvFilter,
    writer: W,
) -> impl Subscriber + Send + Sync
where
    W: for<'w> MakeWriter<'w> + Send + Sync + 'static,
{
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(writer)
        .with_ansi(style.ansi)
        .event_format(Prioritised {
            inner: Format::default(),
            enabled: style.priority_prefix,
        })
        .finish()
}

/// How text lines are written, decided once at start from stderr and the
/// environment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TextStyle {
    /// ANSI colours and bold.
    pub ansi: bool,
    /// A `<N>` syslog priority at the start of every line, for journald.
    pub priority_prefix: bool,
}

impl TextStyle {
    pub fn detect() -> Self {
        let stderr = std::io::stderr();
        let identity = stderr
            .as_fd()
            .try_clone_to_owned()
            .ok()
            .and_then(|fd| std::fs::File::from(fd).metadata().ok())
            .map(|m| (m.dev(), m.ino()));
        Self::decide(
            stderr.is_terminal(),
            std::env::var_os("NO_COLOR").as_deref(),
            std::env::var_os("JOURNAL_STREAM").as_deref(),
            identity,
        )
    }

    /// `stderr_identity` is stderr's (device, inode). `JOURNAL_STREAM` only
    /// counts when it names that file: a child of a service inherits the
    /// variable while its stderr may go elsewhere.
    pub fn decide(
        stderr_is_terminal: bool,
        no_color: Option<&OsStr>,
        journal_stream: Option<&OsStr>,
        stderr_identity: Option<(u64, u64)>,
    ) -> Self {
        let no_color = no_color.is_some_and(|v| !v.is_empty());
        let journal = match (
            journal_stream.and_then(parse_journal_stream),
            stderr_identity,
        ) {
            (Some(named), Some(actual)) => named == actual,
            _ => false,
        };
        Self {
            ansi: stderr_is_terminal && !no_color,
            priority_prefix: journal,
        }
    }
}

/// `JOURNAL_STREAM=DEVICE:INODE`, both decimal (systemd.exec(5)).
fn parse_journal_stream(value: &OsStr) -> Option<(u64, u64)> {
    let (dev, ino) = value.to_str()?.split_once(':')?;
    Some((dev.parse().ok()?, ino.parse().ok()?))
}

/// The syslog priority journald files a line under (sd-daemon(3)).
pub fn syslog_priority(level: Level) -> u8 {
    match level {
        Level::ERROR => 3,
        Level::WARN => 4,
        Level::INFO => 6,
        Level::DEBUG | Level::TRACE => 7,
    }
}

/// An error written before logging is set up (such as a configuration the
/// daemon cannot use), with the error priority under journald.
pub fn early_error(message: impl fmt::Display) {
    let text = format!("stallwatch: {message}");
    if !TextStyle::detect().priority_prefix {
        eprintln!("{text}");
        return;
    }
    let mut prefixed = String::new();
    for line in text.lines() {
        let _ = writeln!(prefixed, "<3>{line}");
    }
    eprint!("{prefixed}");
}

/// Formats with `inner`, then, when enabled, starts every line of the result
/// with the event's syslog priority (a message may span lines; journald
/// files each line on its own).
struct Prioritised<F> {
    inner: F,
    enabled: bool,
}

impl<S, N, F> FormatEvent<S, N> for Prioritised<F>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
    F: FormatEvent<S, N>,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        if !self.enabled {
            return self.inner.format_event(ctx, writer, event);
        }
        let mut text = String::new();
        self.inner
            .format_event(ctx, Writer::new(&mut text), event)?;
        let priority = syslog_priority(*event.metadata().level());
        for line in text.split_inclusive('\n') {
            write!(writer, "<{priority}>{line}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
