//! Linux tids of Python threads on CPython before 3.11, read without
//! stopping the job.
//!
//! Before 3.11 a `PyThreadState` keeps no `native_thread_id`, only its
//! `thread_id`: the `pthread_t` of the thread, which on glibc and musl is the
//! address of the C library's own thread descriptor. That descriptor holds
//! the kernel tid (as the job's PID namespace numbers it) at an offset fixed
//! for a given C library build: 0x2d0 on glibc x86_64, 0xd0 on glibc aarch64,
//! 0x30 on 64-bit musl. The offset is found once per process by reading the
//! first [`WINDOW`] bytes of every descriptor and keeping the offset at which
//! each of them holds a distinct tid of the process; after that a read costs
//! four bytes a thread, checked against the process's tids every time (a
//! descriptor is reused for the next thread once one ends). py-spy's own way
//! (registers of a stopped thread) needs the job stopped, which this reader
//! never does.

use std::collections::{HashMap, HashSet};

/// Bytes of each descriptor searched for the tid.
pub const WINDOW: usize = 1024;

/// Offsets of the tid in the C libraries' descriptors, preferred when more
/// than one offset fits: glibc x86_64, glibc aarch64, musl on 64 bits.
const KNOWN: [usize; 3] = [0x2d0, 0xd0, 0x30];

/// Reads `buf.len()` bytes of the job's memory at `address`.
pub trait Memory {
    fn read(&self, address: usize, buf: &mut [u8]) -> bool;
}

impl Memory for remoteprocess::Process {
    fn read(&self, address: usize, buf: &mut [u8]) -> bool {
        remoteprocess::ProcessMemory::read(self, address, buf).is_ok()
    }
}

fn u32_at(bytes: &[u8], offset: usize) -> Option<u32> {
    let b = bytes.get(offset..offset + 4)?;
    Some(u32::from_ne_bytes([b[0], b[1], b[2], b[3]]))
}

/// The offset at which every descriptor holds a distinct tid of `tids`, if
/// exactly one does (or a known one among several). One descriptor alone is
/// taken only at a known offset: any word of it could hold a small number.
pub fn choose_offset(windows: &[Vec<u8>], tids: &HashSet<u32>) -> Option<usize> {
    if windows.is_empty() {
        return None;
    }
    let fits = |offset: usize| {
        let mut seen = HashSet::with_capacity(windows.len());
        windows.iter().all(|w| {
            u32_at(w, offset).is_some_and(|tid| tid != 0 && tids.contains(&tid) && seen.insert(tid))
        })
    };
    if let Some(known) = KNOWN.iter().copied().find(|o| fits(*o)) {
        return Some(known);
    }
    if windows.len() < 2 {
        return None;
    }
    let mut found = (0..WINDOW).step_by(4).filter(|o| fits(*o));
    match (found.next(), found.next()) {
        (Some(offset), None) => Some(offset),
        _ => None,
    }
}

/// Finds the tids of a process's Python threads from their `pthread_t`.
#[derive(Debug, Default)]
pub struct TidFinder {
    offset: Option<usize>,
}

impl TidFinder {
    /// The tid (in the job's own PID namespace) of each of `pthreads` that
    /// could be found; `tids` are the job's own tids now. `main` is the
    /// job's main thread (its pid in its own namespace): the one thread left
    /// when every other was found is taken to be it, as py-spy does.
    pub fn find(
        &mut self,
        memory: &impl Memory,
        pthreads: &[u64],
        tids: &HashSet<u32>,
        main: u32,
    ) -> HashMap<u64, u32> {
        let mut found = self.at_offset(memory, pthreads, tids);
        if found.len() < pthreads.len() {
            // Nothing fits where it did, or threads are missing: look again.
            let windows: Vec<(u64, Vec<u8>)> = pthreads
                .iter()
                .filter_map(|p| {
                    let mut w = vec![0; WINDOW];
                    memory
                        .read(usize::try_from(*p).ok()?, &mut w)
                        .then_some((*p, w))
                })
                .collect();
            let only: Vec<Vec<u8>> = windows.into_iter().map(|(_, w)| w).collect();
            if let Some(offset) = choose_offset(&only, tids)
                && Some(offset) != self.offset
            {
                self.offset = Some(offset);
                found = self.at_offset(memory, pthreads, tids);
            }
        }
        let missing: Vec<u64> = pthreads
            .iter()
            .copied()
            .filter(|p| !found.contains_key(p))
            .collect();
        if let [last] = missing.as_slice()
            && tids.contains(&main)
            && !found.values().any(|t| *t == main)
        {
            found.insert(*last, main);
        }
        found
    }

    fn at_offset(
        &self,
        memory: &impl Memory,
        pthreads: &[u64],
        tids: &HashSet<u32>,
    ) -> HashMap<u64, u32> {
        let Some(offset) = self.offset else {
            return HashMap::new();
        };
        let mut taken = HashSet::new();
        pthreads
            .iter()
            .filter_map(|p| {
                let address = usize::try_from(*p).ok()?.checked_add(offset)?;
                let mut b = [0u8; 4];
                if !memory.read(address, &mut b) {
                    return None;
                }
                let tid = u32::from_ne_bytes(b);
                (tids.contains(&tid) && taken.insert(tid)).then_some((*p, tid))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A job's memory: descriptors at addresses, zeros elsewhere.
    struct Fake(HashMap<usize, Vec<u8>>);

    impl Memory for Fake {
        fn read(&self, address: usize, buf: &mut [u8]) -> bool {
            for (start, bytes) in &self.0 {
                if address >= *start && address + buf.len() <= start + bytes.len() {
                    buf.copy_from_slice(&bytes[address - start..address - start + buf.len()]);
                    return true;
                }
            }
            false
        }
    }

    fn descriptor(tid: u32, offset: usize, noise: u32) -> Vec<u8> {
        let mut d = vec![0u8; WINDOW + 64];
        // Words that look like other numbers, and the tid's neighbours.
        for (i, chunk) in d.chunks_mut(4).enumerate() {
            chunk.copy_from_slice(&(noise.wrapping_mul(i as u32 + 7)).to_ne_bytes());
        }
        d[offset..offset + 4].copy_from_slice(&tid.to_ne_bytes());
        d
    }

    fn job(offset: usize, threads: &[(u64, u32)]) -> Fake {
        Fake(
            threads
                .iter()
                .map(|(p, t)| (*p as usize, descriptor(*t, offset, 0x9e37_79b9)))
                .collect(),
        )
    }

    #[test]
    fn glibcs_offset_maps_every_thread() {
        let threads = [
            (0x7f00_0000_1000, 4242),
            (0x7f00_0010_0000, 4250),
            (0x7f00_0020_0000, 4251),
        ];
        let memory = job(0x2d0, &threads);
        let tids: HashSet<u32> = [4242, 4250, 4251, 4260].into();
        let pthreads: Vec<u64> = threads.iter().map(|t| t.0).collect();
        let mut finder = TidFinder::default();
        let found = finder.find(&memory, &pthreads, &tids, 4242);
        assert_eq!(found, threads.iter().copied().collect());
        assert_eq!(finder.offset, Some(0x2d0));
    }

    #[test]
    fn an_unknown_library_is_found_when_one_offset_fits_every_thread() {
        let threads = [(0x1000, 17), (0x10_0000, 23)];
        let memory = job(0x140, &threads);
        let tids: HashSet<u32> = [17, 23, 30].into();
        let mut finder = TidFinder::default();
        let found = finder.find(&memory, &[0x1000, 0x10_0000], &tids, 17);
        assert_eq!(found.get(&0x1000), Some(&17));
        assert_eq!(found.get(&0x10_0000), Some(&23));
    }

    #[test]
    fn a_reused_descriptor_is_read_afresh() {
        let mut finder = TidFinder::default();
        let tids: HashSet<u32> = [100, 101].into();
        let memory = job(0x2d0, &[(0x5000, 100), (0x9000, 101)]);
        finder.find(&memory, &[0x5000, 0x9000], &tids, 100);
        // Thread 101 ended; its descriptor now holds thread 102.
        let memory = job(0x2d0, &[(0x5000, 100), (0x9000, 102)]);
        let tids: HashSet<u32> = [100, 102].into();
        let found = finder.find(&memory, &[0x5000, 0x9000], &tids, 100);
        assert_eq!(found.get(&0x9000), Some(&102));
    }

    #[test]
    fn what_cannot_be_found_stays_unknown_except_the_main_thread() {
        // Unreadable descriptors (another C library, torn memory).
        let memory = Fake(HashMap::new());
        let tids: HashSet<u32> = [50, 51, 52].into();
        let mut finder = TidFinder::default();
        assert!(finder.find(&memory, &[0x1, 0x2], &tids, 50).is_empty());
        // One Python thread, which is the main one.
        let found = finder.find(&memory, &[0x1], &tids, 50);
        assert_eq!(found.get(&0x1), Some(&50));
        // A tid that is not the job's is never taken.
        let memory = job(0x2d0, &[(0x3000, 999)]);
        let found = finder.find(&memory, &[0x3000, 0x4000], &tids, 50);
        assert!(found.is_empty(), "{found:?}");
    }

    #[test]
    fn one_descriptor_alone_is_trusted_only_at_a_known_offset() {
        let tids: HashSet<u32> = [7].into();
        assert_eq!(choose_offset(&[descriptor(7, 0x30, 3)], &tids), Some(0x30));
        assert_eq!(choose_offset(&[descriptor(7, 0x200, 3)], &tids), None);
    }
}
