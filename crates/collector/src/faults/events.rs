//! NVML events, on a thread of their own: one event set with every GPU
//! registered in it for critical Xid errors (and the ECC events each device
//! supports), waited on with a timeout, so the thread sleeps in the driver,
//! wakes when any GPU reports, and never spins. nvml-wrapper's own event loop
//! polls every millisecond and is not used.
//!
//! The thread initialises NVML itself (the sampler's NVML thread may hang in
//! a call; this one must not wait for it), with backoff while it cannot. A
//! GPU that is lost makes every wait on the set fail: the set is made again
//! without it, and it is registered again once it answers; when a wait
//! fails because the driver was unloaded or restarted, NVML is initialised
//! again.

use std::path::PathBuf;
use std::sync::mpsc::Sender;
use std::time::{Duration, Instant, SystemTime};

use nvml_wrapper::bitmasks::event::EventTypes;
use nvml_wrapper::enums::event::XidError;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::event::EventSet;
use nvml_wrapper::struct_wrappers::event::EventData;
use nvml_wrapper::{Device, Nvml};

use super::report::{GpuRef, XidReport};
use crate::meter::{Meter, Work};
use crate::sample::faults::FaultSource;
use crate::time::unix_seconds;

const FIRST_RETRY: Duration = Duration::from_secs(1);
/// Longest pause between two attempts to initialise NVML for events: the
/// driver back, events flow again within this.
const MAX_RETRY: Duration = Duration::from_secs(10);
/// How often a library without the event calls is looked at again (a
/// driver upgrade may bring them).
const NO_EVENTS_RETRY: Duration = Duration::from_secs(60);
/// How often the GPUs that answer are looked at again (a lost GPU back, a
/// new one registered).
const REGISTER_EVERY: Duration = Duration::from_secs(10);
/// The shortest wait on the set, and the pause after a failed wait.
const MIN_WAIT: Duration = Duration::from_millis(20);

/// The events asked for, where the device supports them.
fn wanted() -> EventTypes {
    EventTypes::CRITICAL_XID_ERROR
        | EventTypes::SINGLE_BIT_ECC_ERROR
        | EventTypes::DOUBLE_BIT_ECC_ERROR
}

pub fn run(library: Option<PathBuf>, wait: Duration, tx: Sender<XidReport>, meter: Meter) {
    let mut backoff = FIRST_RETRY;
    let mut logged: Option<String> = None;
    loop {
        let init = match &library {
            Some(path) => Nvml::builder().lib_path(path.as_os_str()).init(),
            None => Nvml::init(),
        };
        match init {
            Ok(nvml) => {
                match events_missing(&nvml) {
                    Some(missing) => {
                        if logged.as_deref() != Some(missing) {
                            tracing::info!(
                                missing,
                                "NVML has no event calls; Xid errors come from the kernel log only"
                            );
                            logged = Some(missing.to_owned());
                        }
                        drop(nvml);
                        std::thread::sleep(NO_EVENTS_RETRY);
                        continue;
                    }
                    None => logged = None,
                }
                match watch(&nvml, wait, &tx, meter) {
                    Err(()) => return, // the sampler is gone
                    // A session that waited on sets starts the backoff over;
                    // one that never got that far (the driver is still not
                    // there) waits longer each time.
                    Ok(true) => backoff = FIRST_RETRY,
                    Ok(false) => {}
                }
                drop(nvml);
                std::thread::sleep(backoff);
                backoff = (backoff * 2).min(MAX_RETRY);
            }
            Err(err) => {
                tracing::debug!(error = %err, "NVML events: NVML not available");
                std::thread::sleep(backoff);
                backoff = (backoff * 2).min(MAX_RETRY);
            }
        }
    }
}

/// The first event call the library lacks. `EventSet`'s drop calls
/// `nvmlEventSetFree` unchecked (it panics when the symbol is missing), so
/// no set is made without it.
fn events_missing(nvml: &Nvml) -> Option<&'static str> {
    let lib = nvml.lib();
    [
        ("nvmlEventSetCreate", lib.nvmlEventSetCreate.is_ok()),
        ("nvmlEventSetFree", lib.nvmlEventSetFree.is_ok()),
        (
            "nvmlDeviceRegisterEvents",
            lib.nvmlDeviceRegisterEvents.is_ok(),
        ),
        ("nvmlEventSetWait_v2", lib.nvmlEventSetWait_v2.is_ok()),
    ]
    .into_iter()
    .find(|(_, ok)| !ok)
    .map(|(name, _)| name)
}

/// A GPU whose events the set records.
struct Member {
    index: u32,
    uuid: String,
    /// The device handle events carry, to tell which GPU an event is from.
    handle: usize,
}

/// The one event set, with every GPU that answered registered in it.
struct Registered<'n> {
    set: EventSet<'n>,
    members: Vec<Member>,
}

impl Registered<'_> {
    fn indices(&self) -> Vec<u32> {
        self.members.iter().map(|m| m.index).collect()
    }
}

/// Waits on the set until NVML must be initialised again (`Ok`, with
/// whether a set was waited on) or the receiver is gone (`Err`).
fn watch(nvml: &Nvml, wait: Duration, tx: &Sender<XidReport>, meter: Meter) -> Result<bool, ()> {
    let mut registered: Option<Registered> = None;
    let mut next_register = Instant::now();
    let mut had_set = false;
    let ms = u32::try_from(wait.max(MIN_WAIT).as_millis()).unwrap_or(u32::MAX);
    loop {
        if Instant::now() >= next_register {
            next_register = Instant::now() + REGISTER_EVERY;
            match nvml.device_count() {
                Ok(count) => {
                    // The set's GPUs answer (a lost one fails every wait);
                    // only the others are looked at.
                    let have = registered
                        .as_ref()
                        .map(Registered::indices)
                        .unwrap_or_default();
                    let joining = (0..count).any(|i| {
                        !have.contains(&i)
                            && candidate(nvml, i).is_some_and(|c| registers(nvml, &c))
                    });
                    if joining {
                        registered = rebuild(nvml, registered, answering(nvml, count), tx)?;
                    }
                }
                Err(err) => {
                    tracing::debug!(error = %err, "NVML events: device count failed; initialising again");
                    return Ok(had_set);
                }
            }
        }
        let Some(reg) = &registered else {
            meter.finished(Work::Nvml);
            std::thread::sleep(wait);
            continue;
        };
        had_set = true;
        meter.finished(Work::Nvml);
        match reg.set.wait(ms) {
            Ok(data) => {
                if let Some(report) = report(&reg.members, &data) {
                    tx.send(report).map_err(|_| ())?;
                }
            }
            Err(NvmlError::Timeout) => {}
            Err(NvmlError::GpuLost) => {
                // One of the set's GPUs fell off the bus; the set reports it
                // on every wait. Made again at once from the GPUs that still
                // answer; the lost one is tried again every REGISTER_EVERY.
                let before = reg.indices();
                let candidates = match nvml.device_count() {
                    Ok(count) => answering(nvml, count),
                    Err(_) => Vec::new(),
                };
                registered = rebuild(nvml, registered, candidates, tx)?;
                let after = registered
                    .as_ref()
                    .map(Registered::indices)
                    .unwrap_or_default();
                for gpu in before.iter().filter(|i| !after.contains(i)) {
                    tracing::warn!(gpu, "NVML events: GPU lost; waiting for it to answer again");
                }
                if after == before {
                    // Every GPU still answers, yet the set says one is lost:
                    // pause, so that nothing the library does can make this spin.
                    std::thread::sleep(MIN_WAIT.max(wait / 4));
                }
                next_register = Instant::now() + REGISTER_EVERY;
            }
            Err(err) => {
                tracing::debug!(error = %err, "NVML events: wait failed");
                registered = None;
                if matches!(
                    err,
                    NvmlError::Uninitialized | NvmlError::DriverNotLoaded | NvmlError::Unknown
                ) {
                    // The driver was unloaded or restarted: initialise NVML
                    // again (after the backoff).
                    return Ok(true);
                }
                std::thread::sleep(MIN_WAIT.max(wait / 4));
            }
        }
    }
}

/// A GPU that answers and supports an event asked for.
struct Candidate<'n> {
    index: u32,
    uuid: String,
    device: Device<'n>,
    types: EventTypes,
}

/// The GPUs that answer now, in index order, with the events each supports.
fn answering(nvml: &Nvml, count: u32) -> Vec<Candidate<'_>> {
    (0..count)
        .filter_map(|index| candidate(nvml, index))
        .collect()
}

/// GPU `index`, if it answers and supports an event asked for.
fn candidate(nvml: &Nvml, index: u32) -> Option<Candidate<'_>> {
    let device = nvml.device_by_index(index).ok()?;
    let uuid = device.uuid().ok()?;
    let types = match device.supported_event_types() {
        Ok(t) => t & wanted(),
        Err(NvmlError::GpuLost) => return None,
        Err(_) => EventTypes::CRITICAL_XID_ERROR,
    };
    (!types.is_empty()).then_some(Candidate {
        index,
        uuid,
        device,
        types,
    })
}

/// Whether the candidate can be registered, tried on a set of its own (freed
/// after): a GPU whose registration keeps failing never makes the shared
/// set be made again, and so never costs the others an event.
fn registers(nvml: &Nvml, c: &Candidate) -> bool {
    nvml.create_event_set()
        .is_ok_and(|set| c.device.register_events(c.types, set).is_ok())
}

/// A new set with every candidate registered. The old set's events are
/// delivered first, then it is freed. A registration that fails frees the
/// set it was made on (NVML leaves it undefined), so the set is made again
/// without that GPU; it is tried again every REGISTER_EVERY.
fn rebuild<'n>(
    nvml: &'n Nvml,
    old: Option<Registered<'n>>,
    mut candidates: Vec<Candidate<'n>>,
    tx: &Sender<XidReport>,
) -> Result<Option<Registered<'n>>, ()> {
    if let Some(old) = old {
        // Until the first timeout or error (a lost GPU fails every wait).
        while let Ok(data) = old.set.wait(0) {
            if let Some(report) = report(&old.members, &data) {
                tx.send(report).map_err(|_| ())?;
            }
        }
    }
    'make: loop {
        if candidates.is_empty() {
            return Ok(None);
        }
        let Ok(mut set) = nvml.create_event_set() else {
            return Ok(None);
        };
        let mut members = Vec::with_capacity(candidates.len());
        for (i, c) in candidates.iter().enumerate() {
            match c.device.register_events(c.types, set) {
                Ok(registered) => {
                    set = registered;
                    tracing::debug!(gpu = c.index, events = ?c.types, "NVML events registered");
                    members.push(Member {
                        index: c.index,
                        uuid: c.uuid.clone(),
                        // SAFETY: the handle is only compared, never used.
                        handle: unsafe { c.device.handle() } as usize,
                    });
                }
                Err(err) => {
                    tracing::debug!(gpu = c.index, error = %err.error, "NVML events: registration failed");
                    candidates.remove(i);
                    continue 'make;
                }
            }
        }
        return Ok(Some(Registered { set, members }));
    }
}

/// The Xid an event reports, named by the GPU it came from.
fn report(members: &[Member], data: &EventData) -> Option<XidReport> {
    if !data.event_type.contains(EventTypes::CRITICAL_XID_ERROR) {
        // ECC events: the counters the sampler reads say the rest.
        return None;
    }
    // SAFETY: the handle is only compared, never used.
    let handle = unsafe { data.device.handle() } as usize;
    let uuid = match members.iter().find(|m| m.handle == handle) {
        Some(m) => m.uuid.clone(),
        None => data.device.uuid().ok()?,
    };
    let xid = match data.event_data {
        Some(XidError::Value(v)) => u32::try_from(v).unwrap_or(u32::MAX),
        Some(XidError::Unknown) | None => 999,
    };
    Some(XidReport {
        at_seconds: unix_seconds(SystemTime::now()),
        gpu: GpuRef::Uuid(uuid),
        xid,
        source: FaultSource::Nvml,
        pid: None,
        comm: None,
        detail: String::new(),
    })
}
