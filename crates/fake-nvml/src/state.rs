//! The process-wide state: the init count and the scenario in use, loaded from
//! the file named by `STALLWATCH_FAKE_NVML` and reloaded whenever it changes.

use std::path::PathBuf;
use std::sync::{Mutex, MutexGuard};
use std::time::Instant;

use crate::codes::{Ret, UNINITIALIZED, UNKNOWN};
use crate::scenario::{Gpu, Scenario};
use crate::watch::{Look, Watch};

/// A scenario in use, with the moment it was loaded and each GPU's energy
/// counter at that moment.
pub struct Loaded {
    pub scenario: Scenario,
    path: PathBuf,
    at: Instant,
    energy_at_load_mj: Vec<u64>,
}

impl Loaded {
    /// How long this version of the scenario has been in use.
    pub fn age(&self) -> std::time::Duration {
        self.at.elapsed()
    }

    pub fn gpu(&self, index: usize) -> Option<&Gpu> {
        self.scenario.gpus.get(index)
    }

    /// Energy counter in millijoules: the value at load time plus the integral
    /// of the current power draw since then.
    pub fn energy_mj(&self, index: usize) -> u64 {
        let (Some(gpu), Some(start)) = (self.gpu(index), self.energy_at_load_mj.get(index)) else {
            return 0;
        };
        let us = self.at.elapsed().as_micros();
        let grown = us.saturating_mul(u128::from(gpu.power_mw)) / 1_000_000;
        start.saturating_add(u64::try_from(grown).unwrap_or(u64::MAX))
    }
}

pub struct State {
    pub init_count: u32,
    pub loaded: Option<Loaded>,
    watch: Watch,
}

static STATE: Mutex<State> = Mutex::new(State {
    init_count: 0,
    loaded: None,
    watch: Watch::new(),
});

/// Locks the state and brings it up to date with the scenario file.
/// `Err` names a problem with the file; the last good scenario stays in use.
pub fn lock() -> (MutexGuard<'static, State>, Result<(), String>) {
    let mut st = STATE
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let res = st.refresh();
    (st, res)
}

/// Locks the state for a call that needs an initialised library.
pub fn lock_ready() -> Result<MutexGuard<'static, State>, Ret> {
    let (st, _) = lock();
    if st.init_count == 0 {
        return Err(UNINITIALIZED);
    }
    if st.loaded.is_none() {
        return Err(UNKNOWN);
    }
    Ok(st)
}

impl State {
    /// The scenario in use.
    pub fn current(&self) -> Result<&Loaded, Ret> {
        self.loaded.as_ref().ok_or(UNKNOWN)
    }

    fn refresh(&mut self) -> Result<(), String> {
        let (path, text) = match self.watch.look() {
            Look::Same => return Ok(()),
            Look::Bad(msg) => return Err(msg),
            Look::New { path, text } => (path, text),
        };
        match Scenario::parse(&text) {
            Ok(scenario) => {
                self.install(scenario, path);
                self.watch.outcome(None);
                Ok(())
            }
            Err(e) => {
                let msg = format!("invalid scenario {}: {e}", path.display());
                self.watch.outcome(Some(msg.clone()));
                Err(msg)
            }
        }
    }

    /// Puts `scenario` in use. Energy counters of the same file carry over and
    /// never go backwards: each starts at the larger of its `energy_mj` and the
    /// value it had reached.
    fn install(&mut self, scenario: Scenario, path: PathBuf) {
        let previous = self.loaded.take().filter(|old| old.path == path);
        let energy_at_load_mj = scenario
            .gpus
            .iter()
            .enumerate()
            .map(|(i, gpu)| {
                let carried = previous.as_ref().filter(|old| i < old.scenario.gpus.len());
                carried.map_or(gpu.energy_mj, |old| old.energy_mj(i).max(gpu.energy_mj))
            })
            .collect();
        self.loaded = Some(Loaded {
            scenario,
            path,
            at: Instant::now(),
            energy_at_load_mj,
        });
    }
}
