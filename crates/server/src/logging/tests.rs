use std::ffi::OsStr;
use std::io;
use std::sync::{Arc, Mutex};

use tracing_subscriber::EnvFilter;
use tracing_subscriber::fmt::MakeWriter;

use super::{TextStyle, text_subscriber};

const STDERR: Option<(u64, u64)> = Some((64768, 1234));

fn decide(terminal: bool, no_color: Option<&str>, journal: Option<&str>) -> TextStyle {
    TextStyle::decide(
        terminal,
        no_color.map(OsStr::new),
        journal.map(OsStr::new),
        STDERR,
    )
}

#[test]
fn colour_only_on_a_terminal_without_no_color() {
    assert!(decide(true, None, None).ansi);
    assert!(
        decide(true, Some(""), None).ansi,
        "an empty NO_COLOR does not count"
    );
    assert!(!decide(true, Some("1"), None).ansi);
    assert!(
        !decide(false, None, None).ansi,
        "a pipe or file gets no escape codes"
    );
}

#[test]
fn priorities_only_when_stderr_is_the_journal_stream() {
    assert!(decide(false, None, Some("64768:1234")).priority_prefix);
    assert!(!decide(false, None, None).priority_prefix);
    // Inherited from a service by a process whose stderr goes elsewhere.
    assert!(!decide(false, None, Some("64768:999")).priority_prefix);
    assert!(!decide(false, None, Some("1:1234")).priority_prefix);
    for bad in ["", "64768", "64768:", ":1234", "a:b", "64768:1234:5"] {
        assert!(!decide(false, None, Some(bad)).priority_prefix, "{bad:?}");
    }
    let unknown = TextStyle::decide(false, None, Some(OsStr::new("64768:1234")), None);
    assert!(!unknown.priority_prefix, "stderr closed or unreadable");
}

#[test]
fn syslog_priorities_follow_sd_daemon() {
    use super::syslog_priority;
    use tracing::Level;
    assert_eq!(syslog_priority(Level::ERROR), 3);
    assert_eq!(syslog_priority(Level::WARN), 4);
    assert_eq!(syslog_priority(Level::INFO), 6);
    assert_eq!(syslog_priority(Level::DEBUG), 7);
    assert_eq!(syslog_priority(Level::TRACE), 7);
}

/// Collects what the subscriber writes.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl io::Write for Captured {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl<'a> MakeWriter<'a> for Captured {
    type Writer = Captured;
    fn make_writer(&'a self) -> Self::Writer {
        self.clone()
    }
}

fn log_all_levels(style: TextStyle) -> String {
    let out = Captured::default();
    let subscriber = text_subscriber(style, EnvFilter::new("trace"), out.clone());
    tracing::subscriber::with_default(subscriber, || {
        tracing::error!(code = 7, "it broke");
        tracing::warn!("two\nlines");
        tracing::info!(listen = "0.0.0.0:9847", "started");
        tracing::debug!("detail");
        tracing::trace!("more detail");
    });
    String::from_utf8(out.0.lock().unwrap().clone()).unwrap()
}

#[test]
fn journal_lines_start_with_their_priority() {
    let text = log_all_levels(TextStyle {
        ansi: false,
        priority_prefix: true,
    });
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 6, "{text}");
    let priorities: Vec<&str> = lines.iter().map(|l| &l[..3]).collect();
    assert_eq!(
        priorities,
        ["<3>", "<4>", "<4>", "<6>", "<7>", "<7>"],
        "{text}"
    );
    assert!(
        lines[0].contains("ERROR") && lines[0].contains("it broke") && lines[0].ends_with("code=7")
    );
    assert!(
        lines[1].ends_with("two") && lines[2] == "<4>lines",
        "each line of a message: {text}"
    );
    assert!(
        lines[3].contains("started listen=\"0.0.0.0:9847\""),
        "{text}"
    );
    assert!(!text.contains('\x1b'), "{text}");
}

#[test]
fn plain_lines_have_no_prefix_and_no_escape_codes() {
    let text = log_all_levels(TextStyle {
        ansi: false,
        priority_prefix: false,
    });
    assert!(text.lines().all(|l| !l.starts_with('<')), "{text}");
    assert!(
        text.contains(" WARN ") && text.contains("two\nlines"),
        "{text}"
    );
    assert!(!text.contains('\x1b'), "{text}");
}

#[test]
fn terminal_lines_are_coloured() {
    let text = log_all_levels(TextStyle {
        ansi: true,
        priority_prefix: false,
    });
    assert!(text.contains("\x1b["), "{text}");
}
