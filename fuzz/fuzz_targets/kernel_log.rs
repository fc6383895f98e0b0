//! The kernel-log Xid parser (`/dev/kmsg` records and plain lines), fed
//! through the line splitter the reader uses: any bytes, in any pieces.
#![no_main]

use collector::faults::Lines;
use collector::faults::kmsg::{PciAddr, parse_line};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // The first byte picks where the input is cut in two, as two reads.
    let (cut, bytes) = match data.split_first() {
        Some((c, rest)) => (usize::from(*c).min(rest.len()), rest),
        None => (0, data),
    };
    let mut lines = Lines::default();
    let mut all = lines.feed(&bytes[..cut]);
    all.extend(lines.feed(&bytes[cut..]));
    for line in all.iter().map(Vec::as_slice).chain([bytes]) {
        if let Some(x) = parse_line(line) {
            assert!(x.comm.as_ref().is_none_or(|c| c.chars().count() <= 32), "{x:?}");
            assert!(x.detail.chars().count() <= 160, "{x:?}");
            assert!(x.pid != Some(0), "{x:?}");
            assert_eq!(PciAddr::parse(&x.pci.to_string()), Some(x.pci));
        }
    }
});
