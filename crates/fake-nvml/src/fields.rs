//! Field values of power and PCIe traffic: `NVML_FI_DEV_POWER_INSTANT` (186)
//! from `power_mw`, and the cumulative PCIe byte counters
//! `NVML_FI_DEV_PCIE_COUNT_TX_BYTES` (197) and `_RX_BYTES` (198), which grow
//! at `pcie_tx_kbps` and `pcie_rx_kbps`.

use std::ffi::c_uint;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::scenario::{Feature, Gpu, MAX_GPUS};

pub const POWER_INSTANT: c_uint = 186;
pub const PCIE_TX_BYTES: c_uint = 197;
pub const PCIE_RX_BYTES: c_uint = 198;

/// `NVML_VALUE_TYPE_UNSIGNED_INT`, `..._UNSIGNED_LONG_LONG`.
const UINT: c_uint = 1;
const ULL: c_uint = 3;

/// Whether field `id` is one of the PCIe byte counters (the slow fields).
pub fn is_pcie_counter(id: c_uint) -> bool {
    matches!(id, PCIE_TX_BYTES | PCIE_RX_BYTES)
}

/// The value type and value of field `id` of GPU `index`, when it is one of
/// this module's fields: `Some(Err(()))` when the GPU does not support it.
pub fn field(index: usize, gpu: &Gpu, id: c_uint) -> Option<Result<(c_uint, u64), ()>> {
    let supported = |features: &[Feature]| features.iter().all(|f| gpu.supports(*f));
    Some(match id {
        POWER_INSTANT => supported(&[Feature::Power, Feature::PowerInstantField])
            .then(|| (UINT, u64::from(gpu.power_mw)))
            .ok_or(()),
        PCIE_TX_BYTES | PCIE_RX_BYTES => {
            if !supported(&[Feature::Pcie, Feature::PcieCounterFields]) {
                return Some(Err(()));
            }
            let (tx, rx) = pcie_bytes(index, gpu);
            Ok((ULL, if id == PCIE_TX_BYTES { tx } else { rx }))
        }
        _ => return None,
    })
}

/// A GPU's PCIe byte counters. Both are kept in bytes × 10⁶ (KiB/s × 1024 ×
/// µs), so that no fraction of a byte is lost between reads.
#[derive(Debug, Clone, Copy, Default)]
struct Counters {
    at: Option<Instant>,
    tx: u128,
    rx: u128,
}

impl Counters {
    /// Advances both counters to `now` at the given rates (KiB/s), which apply
    /// to the whole time since the previous read, and answers (TX, RX) in
    /// bytes. The first read starts them at 0.
    fn read(&mut self, now: Instant, tx_kbps: u32, rx_kbps: u32) -> (u64, u64) {
        let since = self
            .at
            .map_or(Duration::ZERO, |at| now.saturating_duration_since(at));
        let us = since.as_micros();
        let grow = |kbps: u32| u128::from(kbps) * 1024 * us;
        self.tx = self.tx.wrapping_add(grow(tx_kbps));
        self.rx = self.rx.wrapping_add(grow(rx_kbps));
        self.at = Some(self.at.map_or(now, |at| at.max(now)));
        // The counters are 64-bit: they wrap as a real one can.
        let bytes = |acc: u128| (acc / 1_000_000) as u64;
        (bytes(self.tx), bytes(self.rx))
    }
}

/// Each GPU's counters (by index), kept across calls and scenario reloads for
/// the life of the process.
static COUNTERS: Mutex<[Counters; MAX_GPUS]> = Mutex::new(
    [Counters {
        at: None,
        tx: 0,
        rx: 0,
    }; MAX_GPUS],
);

/// (TX, RX) byte counters of GPU `index`, advanced to now at its current rates.
fn pcie_bytes(index: usize, gpu: &Gpu) -> (u64, u64) {
    let mut all = COUNTERS
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    all.get_mut(index).map_or((0, 0), |c| {
        c.read(Instant::now(), gpu.pcie_tx_kbps, gpu.pcie_rx_kbps)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn counters_accumulate_at_the_rate_since_the_previous_read() {
        let t0 = Instant::now();
        let mut c = Counters::default();
        assert_eq!(c.read(t0, 1000, 2000), (0, 0), "the first read starts at 0");
        // One second at 1000 and 2000 KiB/s.
        assert_eq!(c.read(t0 + ms(1000), 1000, 2000), (1_024_000, 2_048_000));
        // The rate changes: the slope changes, the counter carries on.
        assert_eq!(
            c.read(t0 + ms(1500), 4000, 0),
            (1_024_000 + 2_048_000, 2_048_000)
        );
        // Fractions of a byte carry over between reads: 1 KiB/s for 1 ms is
        // 1.024 bytes; a thousand such reads make 1024.
        let mut c = Counters::default();
        c.read(t0, 1, 1);
        let mut last = (0, 0);
        for i in 1..=1000 {
            last = c.read(t0 + ms(i), 1, 1);
        }
        assert_eq!(last, (1024, 1024));
        // A read with an earlier instant (another thread's) adds nothing.
        assert_eq!(c.read(t0, 1, 1), (1024, 1024));
    }

    #[test]
    fn fields_and_their_switches() {
        let mut gpu = Gpu {
            power_mw: 123_456,
            pcie_tx_kbps: 10,
            ..Gpu::default()
        };
        assert_eq!(field(63, &gpu, POWER_INSTANT), Some(Ok((UINT, 123_456))));
        let Some(Ok((ULL, _))) = field(63, &gpu, PCIE_TX_BYTES) else {
            panic!("field 197 answers an unsigned long long");
        };
        assert_eq!(field(63, &gpu, 3), None);
        gpu.unsupported = vec![Feature::PowerInstantField, Feature::PcieCounterFields];
        assert_eq!(field(63, &gpu, POWER_INSTANT), Some(Err(())));
        assert_eq!(field(63, &gpu, PCIE_TX_BYTES), Some(Err(())));
        assert_eq!(field(63, &gpu, PCIE_RX_BYTES), Some(Err(())));
        gpu.unsupported = vec![Feature::Power, Feature::Pcie];
        assert_eq!(field(63, &gpu, POWER_INSTANT), Some(Err(())));
        assert_eq!(field(63, &gpu, PCIE_RX_BYTES), Some(Err(())));
    }
}
