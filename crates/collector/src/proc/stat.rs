//! The few fields of `/proc/<pid>/stat` (and `task/<tid>/stat`) the job
//! reader uses, the three numbers of `schedstat`, and the four counters of
//! `io` it keeps, parsed without allocating. procfs's `Stat` parses all 52 fields into a struct with an
//! owned name, every thread every sample; this was a tenth of the daemon's
//! CPU at the benchmark load (docs/benchmarks.md).

/// Fields of a `stat` line, numbered as in proc(5).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StatFields<'a> {
    /// (1) pid or tid.
    pub pid: u32,
    /// (2) `comm`, without the parentheses; not necessarily UTF-8.
    pub comm: &'a [u8],
    /// (3) state letter.
    pub state: char,
    /// (4)
    pub ppid: u32,
    /// (14) + (15), clock ticks.
    pub cpu_ticks: u64,
    /// (20)
    pub num_threads: u64,
    /// (22) clock ticks after boot.
    pub starttime: u64,
    /// (24) pages.
    pub rss_pages: u64,
}

impl StatFields<'_> {
    /// The name as text (invalid UTF-8 replaced).
    pub fn comm_string(&self) -> String {
        String::from_utf8_lossy(self.comm).into_owned()
    }
}

/// Parses a `stat` line. The name may hold spaces and parentheses: it ends
/// at the last `)`. `None` when a field the reader uses is missing or not a
/// number (negative values, which the kernel prints only for fields not read
/// here, count as not a number).
pub fn parse_stat(bytes: &[u8]) -> Option<StatFields<'_>> {
    let open = bytes.iter().position(|&b| b == b'(')?;
    let close = bytes.iter().rposition(|&b| b == b')')?;
    if close < open {
        return None;
    }
    let pid = number(trim(&bytes[..open]))?;
    let comm = &bytes[open + 1..close];
    // Fields 3 (state) to 24 (rss), numbered as in proc(5).
    let mut fields: [&[u8]; 22] = [&[]; 22];
    let mut count = 0;
    for (slot, field) in fields.iter_mut().zip(
        bytes[close + 1..]
            .split(|&b| b == b' ' || b == b'\n')
            .filter(|f| !f.is_empty()),
    ) {
        *slot = field;
        count += 1;
    }
    if count < fields.len() {
        return None;
    }
    let field = |n: usize| number(fields[n - 3]);
    let state = match fields[0] {
        [c] if c.is_ascii_alphabetic() => char::from(*c),
        _ => return None,
    };
    Some(StatFields {
        pid: u32::try_from(pid).ok()?,
        comm,
        state,
        ppid: u32::try_from(field(4)?).ok()?,
        cpu_ticks: field(14)?.saturating_add(field(15)?),
        num_threads: field(20)?,
        starttime: field(22)?,
        rss_pages: field(24)?,
    })
}

/// `schedstat`: time on a CPU (ns), time waiting on a run queue (ns), and
/// timeslices run. All zero when the kernel keeps no such accounting.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Schedstat {
    pub run_ns: u64,
    pub wait_ns: u64,
    pub timeslices: u64,
}

impl Schedstat {
    /// Time on a CPU, in seconds.
    pub fn cpu_seconds(&self) -> f64 {
        self.run_ns as f64 * 1e-9
    }

    /// Time runnable on a run queue, waiting for a CPU, in seconds.
    pub fn wait_seconds(&self) -> f64 {
        self.wait_ns as f64 * 1e-9
    }
}

pub fn parse_schedstat(bytes: &[u8]) -> Option<Schedstat> {
    let mut fields = bytes
        .split(|&b| b == b' ' || b == b'\n')
        .filter(|f| !f.is_empty());
    let mut next = || number(fields.next()?);
    Some(Schedstat {
        run_ns: next()?,
        wait_ns: next()?,
        timeslices: next()?,
    })
}

/// `rchar`, `wchar`, `read_bytes` and `write_bytes` of an `io` file; `None`
/// when one is missing or not a number.
pub fn parse_io(bytes: &[u8]) -> Option<crate::sample::IoCounters> {
    let (mut rchar, mut wchar, mut read_bytes, mut write_bytes) = (None, None, None, None);
    for line in bytes.split(|&b| b == b'\n') {
        let Some(colon) = line.iter().position(|&b| b == b':') else {
            continue;
        };
        let slot = match &line[..colon] {
            b"rchar" => &mut rchar,
            b"wchar" => &mut wchar,
            b"read_bytes" => &mut read_bytes,
            b"write_bytes" => &mut write_bytes,
            _ => continue,
        };
        *slot = Some(number(trim(&line[colon + 1..]))?);
    }
    Some(crate::sample::IoCounters {
        rchar: rchar?,
        wchar: wchar?,
        read_bytes: read_bytes?,
        write_bytes: write_bytes?,
    })
}

fn trim(bytes: &[u8]) -> &[u8] {
    bytes.trim_ascii()
}

fn number(bytes: &[u8]) -> Option<u64> {
    if bytes.is_empty() || bytes.len() > 20 {
        return None;
    }
    bytes.iter().try_fold(0u64, |n, &b| {
        let digit = b.checked_sub(b'0').filter(|d| *d < 10)?;
        n.checked_mul(10)?.checked_add(u64::from(digit))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A real line of a Python thread, from this kernel's format.
    const LINE: &[u8] = b"4242 (pt_data_worker) S 4200 4200 4200 0 -1 4194560 1204 0 3 0 \
        150 37 0 0 20 0 21 0 987654 123456789 2345 18446744073709551615 1 1 0 0 0 0 0 \
        16781312 17642 0 0 0 17 1 0 0 0 0 0 0 0 0 0 0 0 0 0\n";

    #[test]
    fn the_fields_the_reader_uses() {
        let s = parse_stat(LINE).unwrap();
        assert_eq!(s.pid, 4242);
        assert_eq!(s.comm, b"pt_data_worker");
        assert_eq!(s.state, 'S');
        assert_eq!(s.ppid, 4200);
        assert_eq!(s.cpu_ticks, 187);
        assert_eq!(s.num_threads, 21);
        assert_eq!(s.starttime, 987654);
        assert_eq!(s.rss_pages, 2345);
    }

    #[test]
    fn agrees_with_procfs_on_real_processes() {
        use procfs::FromRead;
        for entry in std::fs::read_dir("/proc/self/task").unwrap() {
            let path = entry.unwrap().path().join("stat");
            let Ok(bytes) = std::fs::read(&path) else {
                continue;
            };
            let ours = parse_stat(&bytes).unwrap();
            let theirs = procfs::process::Stat::from_read(&bytes[..]).unwrap();
            assert_eq!(ours.pid, theirs.pid as u32);
            assert_eq!(ours.comm_string(), theirs.comm);
            assert_eq!(ours.state, theirs.state);
            assert_eq!(ours.ppid, theirs.ppid as u32);
            assert_eq!(ours.cpu_ticks, theirs.utime + theirs.stime);
            assert_eq!(ours.num_threads, theirs.num_threads as u64);
            assert_eq!(ours.starttime, theirs.starttime);
            assert_eq!(ours.rss_pages, theirs.rss);
        }
    }

    #[test]
    fn a_name_with_spaces_and_parentheses_ends_at_the_last_one() {
        let line = b"7 (a) b (c)) R 1 7 7 0 -1 0 0 0 0 0 5 6 0 0 20 0 1 0 99 0 3 0";
        let s = parse_stat(line).unwrap();
        assert_eq!(s.comm, b"a) b (c)");
        assert_eq!(s.state, 'R');
        assert_eq!(
            (s.cpu_ticks, s.num_threads, s.starttime, s.rss_pages),
            (11, 1, 99, 3)
        );
    }

    #[test]
    fn truncated_or_garbled_lines_are_refused() {
        assert_eq!(parse_stat(b""), None);
        assert_eq!(parse_stat(b"12 (x"), None);
        assert_eq!(parse_stat(b"12 x) S 1"), None);
        assert_eq!(parse_stat(b"12 (x) S 1 2 3"), None, "too few fields");
        assert_eq!(
            parse_stat(b"x (y) S 1 7 7 0 -1 0 0 0 0 0 5 6 0 0 20 0 1 0 99 0 3 0"),
            None
        );
        assert_eq!(
            parse_stat(b"7 (y) S 1 7 7 0 -1 0 0 0 0 0 -5 6 0 0 20 0 1 0 99 0 3 0"),
            None
        );
        assert_eq!(
            parse_stat(b"7 (y) 9 1 7 7 0 -1 0 0 0 0 0 5 6 0 0 20 0 1 0 99 0 3 0"),
            None
        );
        assert_eq!(
            parse_stat(
                b"7 (y) S 99999999999999999999999 7 7 0 -1 0 0 0 0 0 5 6 0 0 20 0 1 0 99 0 3 0"
            ),
            None
        );
    }

    #[test]
    fn io_agrees_with_procfs() {
        use procfs::FromRead;
        let bytes = std::fs::read("/proc/self/io").unwrap();
        let theirs = procfs::process::Io::from_read(&bytes[..]).unwrap();
        let ours = parse_io(&bytes).unwrap();
        assert_eq!(
            (ours.rchar, ours.wchar, ours.read_bytes, ours.write_bytes),
            (
                theirs.rchar,
                theirs.wchar,
                theirs.read_bytes,
                theirs.write_bytes
            )
        );
        assert_eq!(
            parse_io(b"rchar: 1\nwchar: 2\nread_bytes: 3\n"),
            None,
            "write_bytes missing"
        );
        assert_eq!(
            parse_io(b"rchar: 1\nwchar: x\nread_bytes: 3\nwrite_bytes: 4\n"),
            None
        );
    }

    #[test]
    fn schedstat() {
        assert_eq!(
            parse_schedstat(b"123456789 2000 17\n"),
            Some(Schedstat {
                run_ns: 123456789,
                wait_ns: 2000,
                timeslices: 17
            })
        );
        assert_eq!(parse_schedstat(b"1 2"), None);
        assert_eq!(parse_schedstat(b"a b c"), None);
    }
}
