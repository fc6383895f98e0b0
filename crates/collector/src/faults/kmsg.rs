//! Parsing the NVIDIA driver's Xid lines out of the kernel log. Pure: bytes
//! in, a parsed Xid (or nothing) out; `kernel_log` does the reading.
//!
//! The driver writes lines like
//! `NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, GPU has fallen off the bus.`
//! Older drivers leave out `PCI:`, the pid and the name; a pid the driver
//! does not know reads `pid='<unknown>'` or `pid='N/A'`. A `/dev/kmsg` record
//! starts with `prio,seq,usec,flags;`, syslog and `dmesg` lines with a time:
//! anything before `NVRM: Xid (` is ignored.

use serde::{Deserialize, Serialize};

/// Longest line (or `/dev/kmsg` record) that is parsed; longer ones are
/// skipped whole.
pub const MAX_LINE: usize = 4096;
/// The most of a line's free text an Xid keeps.
const MAX_DETAIL: usize = 160;
/// Longest process name kept (the kernel's `comm` is at most 15 bytes).
const MAX_COMM: usize = 32;

const MARKER: &[u8] = b"NVRM: Xid (";

/// A PCI address as `domain:bus:device`, the function left out (the driver's
/// lines have none). Compares equal across the kernel's `0000:3b:00` and
/// NVML's `00000000:3B:00.0`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct PciAddr {
    pub domain: u32,
    pub bus: u32,
    pub device: u32,
}

impl PciAddr {
    /// Parses `domain:bus:device` with an optional `.function`, hex digits,
    /// either case; `None` for anything else.
    pub fn parse(text: &str) -> Option<PciAddr> {
        let text = text.trim();
        let text = text.strip_prefix("PCI:").unwrap_or(text);
        let mut parts = text.split(':');
        let (domain, bus, rest) = (parts.next()?, parts.next()?, parts.next()?);
        if parts.next().is_some() {
            return None;
        }
        let device = match rest.split_once('.') {
            Some((dev, func)) if hex(func, 1).is_some() => dev,
            Some(_) => return None,
            None => rest,
        };
        Some(PciAddr {
            domain: hex(domain, 8)?,
            bus: hex(bus, 2)?,
            device: hex(device, 2)?,
        })
    }
}

fn hex(s: &str, max_digits: usize) -> Option<u32> {
    if s.is_empty() || s.len() > max_digits || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    u32::from_str_radix(s, 16).ok()
}

impl std::fmt::Display for PciAddr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{:04x}:{:02x}:{:02x}",
            self.domain, self.bus, self.device
        )
    }
}

/// One Xid line from the kernel log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KernelXid {
    pub pci: PciAddr,
    pub xid: u32,
    /// The process the driver blamed, when it named one.
    pub pid: Option<u32>,
    pub comm: Option<String>,
    /// The rest of the line (the driver's own words), shortened.
    pub detail: String,
}

/// Parses one line or `/dev/kmsg` record; `None` when it is not a
/// well-formed Xid line.
pub fn parse_line(line: &[u8]) -> Option<KernelXid> {
    if line.len() > MAX_LINE {
        return None;
    }
    // A kmsg record's continuation lines (` KEY=value`) are not part of it.
    let line = line.split(|b| *b == b'\n').next().unwrap_or_default();
    let at = find(line, MARKER)?;
    let rest = String::from_utf8_lossy(&line[at + MARKER.len()..]);
    let (addr, rest) = rest.split_once(')')?;
    let pci = PciAddr::parse(addr)?;
    let rest = rest.strip_prefix(':')?.trim_start();
    let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
    if digits == 0 || digits > 6 {
        return None;
    }
    let xid: u32 = rest[..digits].parse().ok()?;
    let rest = &rest[digits..];
    if !(rest.is_empty() || rest.starts_with(',') || rest.starts_with(' ')) {
        return None;
    }
    let mut fields = rest
        .trim_start_matches(',')
        .split(',')
        .map(str::trim)
        .peekable();
    let mut pid = None;
    let mut comm = None;
    if let Some(v) = fields.peek().and_then(|f| f.strip_prefix("pid=")) {
        pid = v.parse::<u32>().ok().filter(|p| *p > 0);
        fields.next();
        if let Some(v) = fields.peek().and_then(|f| f.strip_prefix("name=")) {
            comm = Some(clean(v, MAX_COMM)).filter(|c| !c.is_empty() && !c.starts_with('<'));
            fields.next();
        }
    }
    let detail: Vec<&str> = fields.collect();
    Some(KernelXid {
        pci,
        xid,
        pid,
        comm,
        detail: clean(&detail.join(", "), MAX_DETAIL),
    })
}

/// Printable characters only, at most `max` of them.
fn clean(s: &str, max: usize) -> String {
    s.chars()
        .filter(|c| !c.is_control())
        .take(max)
        .collect::<String>()
        .trim()
        .to_owned()
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(bus: u32) -> PciAddr {
        PciAddr {
            domain: 0,
            bus,
            device: 0,
        }
    }

    #[test]
    fn kmsg_record_with_pid_and_name() {
        let x = parse_line(
            b"3,1042,123456789,-;NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python3, GPU has fallen off the bus.\n",
        )
        .unwrap();
        assert_eq!(x.pci, addr(0x3b));
        assert_eq!(x.xid, 79);
        assert_eq!(x.pid, Some(1234));
        assert_eq!(x.comm.as_deref(), Some("python3"));
        assert_eq!(x.detail, "GPU has fallen off the bus.");
    }

    #[test]
    fn lines_without_pid_or_prefix() {
        let x = parse_line(b"NVRM: Xid (PCI:0000:10:00): 119, pid='<unknown>', name=<unknown>, Timeout after 6s of waiting for RPC response from GPU0 GSP!").unwrap();
        assert_eq!((x.xid, x.pid, x.comm.as_deref()), (119, None, None));
        let x =
            parse_line(b"[ 966.503025] NVRM: Xid (0000:01:00): 31, Ch 0000000b, engmask 00000120")
                .unwrap();
        assert_eq!((x.pci, x.xid, x.pid), (addr(1), 31, None));
        assert_eq!(x.detail, "Ch 0000000b, engmask 00000120");
        let x = parse_line(b"NVRM: Xid (PCI:0000:10:1c): 63, pid=1896, Row Remapper: New row marked for remapping, reset gpu to activate.").unwrap();
        assert_eq!((x.xid, x.pid, x.comm), (63, Some(1896), None));
        let x = parse_line(b"NVRM: Xid (PCI:0000:65:00): 48").unwrap();
        assert_eq!((x.xid, x.detail.as_str()), (48, ""));
    }

    #[test]
    fn garbage_is_not_an_xid() {
        for line in [
            &b""[..],
            b"NVRM: Xid",
            b"NVRM: Xid (PCI:0000:3b:00)",
            b"NVRM: Xid (PCI:0000:3b:00): ",
            b"NVRM: Xid (PCI:0000:3b:00): x79",
            b"NVRM: Xid (PCI:0000:3b:00): 79x, pid=1",
            b"NVRM: Xid (PCI:zz:3b:00): 79",
            b"NVRM: Xid (PCI:0000:3b:00:00): 79",
            b"NVRM: Xid (PCI:0000:3b): 79",
            b"NVRM: Xid (PCI:0000:3b:00): 99999999999999999999",
            b"NVRM: GPU at PCI:0000:01:00: GPU-bc0fa0b9",
            b"\xff\xfe NVRM: Xid (\xff",
        ] {
            assert_eq!(parse_line(line), None, "{}", String::from_utf8_lossy(line));
        }
    }

    #[test]
    fn overlong_lines_are_skipped_and_fields_are_shortened() {
        let mut long = b"NVRM: Xid (PCI:0000:3b:00): 13, ".to_vec();
        long.resize(MAX_LINE + 1, b'a');
        assert_eq!(parse_line(&long), None);
        let mut line = b"NVRM: Xid (PCI:0000:3b:00): 13, pid=7, name=".to_vec();
        line.extend(std::iter::repeat_n(b'n', 100));
        line.extend(b", ");
        line.extend(std::iter::repeat_n(b'd', 1000));
        let x = parse_line(&line).unwrap();
        assert_eq!(x.comm.unwrap().len(), MAX_COMM);
        assert_eq!(x.detail.len(), MAX_DETAIL);
    }

    #[test]
    fn addresses_compare_across_forms() {
        assert_eq!(
            PciAddr::parse("00000000:3B:00.0"),
            PciAddr::parse("PCI:0000:3b:00")
        );
        assert_eq!(
            PciAddr::parse("0000:3b:00").unwrap().to_string(),
            "0000:3b:00"
        );
        assert_eq!(PciAddr::parse("0000:3b:00.x"), None);
        assert_eq!(PciAddr::parse(""), None);
    }
}
