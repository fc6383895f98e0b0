//! NVML events, on a thread of their own: one event set per GPU registered
//! for critical Xid errors (and the ECC events the device supports), each
//! waited on in turn with a timeout, so the thread sleeps in the driver and
//! never spins. nvml-wrapper's own event loop polls every millisecond and is
//! not used.
//!
//! The thread initialises NVML itself (the sampler's NVML thread may hang in
//! a call; this one must not wait for it), with backoff while it cannot. A
//! GPU that is lost loses its set and is registered again once it answers;
//! when every set fails (the driver was unloaded or restarted), NVML is
//! initialised again.

use std::path::PathBuf;
use std::sync::mpsc::Sender;
use std::time::{Duration, Instant, SystemTime};

use nvml_wrapper::Nvml;
use nvml_wrapper::bitmasks::event::EventTypes;
use nvml_wrapper::enums::event::XidError;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::event::EventSet;
use nvml_wrapper::struct_wrappers::event::EventData;

use super::{FaultSource, GpuRef, XidReport};
use crate::collector::unix_seconds;

const FIRST_RETRY: Duration = Duration::from_secs(1);
/// Longest pause between two attempts to initialise NVML for events: the
/// driver back, events flow again within this.
const MAX_RETRY: Duration = Duration::from_secs(10);
/// How often a library without the event calls is looked at again (a
/// driver upgrade may bring them).
const NO_EVENTS_RETRY: Duration = Duration::from_secs(60);
/// How often GPUs without a set are tried again.
const REGISTER_EVERY: Duration = Duration::from_secs(10);
/// The shortest wait on one set.
const MIN_WAIT: Duration = Duration::from_millis(20);

/// The events asked for, where the device supports them.
fn wanted() -> EventTypes {
    EventTypes::CRITICAL_XID_ERROR
        | EventTypes::SINGLE_BIT_ECC_ERROR
        | EventTypes::DOUBLE_BIT_ECC_ERROR
}

pub fn run(library: Option<PathBuf>, wait: Duration, tx: Sender<XidReport>) {
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
                match watch(&nvml, wait, &tx) {
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

struct Slot<'n> {
    index: u32,
    uuid: String,
    set: EventSet<'n>,
}

/// Waits on the GPUs' sets until NVML must be initialised again (`Ok`, with
/// whether any set was waited on) or the receiver is gone (`Err`).
fn watch(nvml: &Nvml, wait: Duration, tx: &Sender<XidReport>) -> Result<bool, ()> {
    let mut slots: Vec<Slot> = Vec::new();
    let mut next_register = Instant::now();
    let mut had_slots = false;
    loop {
        had_slots |= !slots.is_empty();
        if Instant::now() >= next_register {
            next_register = Instant::now() + REGISTER_EVERY;
            match nvml.device_count() {
                Ok(count) => register_missing(nvml, count, &mut slots),
                Err(err) => {
                    tracing::debug!(error = %err, "NVML events: device count failed; initialising again");
                    return Ok(had_slots);
                }
            }
        }
        if slots.is_empty() {
            std::thread::sleep(wait);
            continue;
        }
        let slice = (wait / slots.len() as u32).max(MIN_WAIT);
        let ms = u32::try_from(slice.as_millis()).unwrap_or(u32::MAX);
        let mut failed = Vec::new();
        let mut driver_gone = false;
        let mut waited = false;
        for (i, slot) in slots.iter().enumerate() {
            match slot.set.wait(ms) {
                Ok(data) => {
                    if let Some(report) = report(slot, &data) {
                        tx.send(report).map_err(|_| ())?;
                    }
                }
                Err(NvmlError::Timeout) => waited = true,
                Err(NvmlError::GpuLost) => {
                    tracing::warn!(
                        gpu = slot.index,
                        "NVML events: GPU lost; waiting for it to answer again"
                    );
                    failed.push(i);
                }
                Err(err) => {
                    tracing::debug!(gpu = slot.index, error = %err, "NVML events: wait failed");
                    driver_gone |= matches!(
                        err,
                        NvmlError::Uninitialized | NvmlError::DriverNotLoaded | NvmlError::Unknown
                    );
                    failed.push(i);
                }
            }
        }
        for i in failed.iter().rev() {
            slots.remove(*i);
        }
        if slots.is_empty() && driver_gone {
            // Every set failed and the driver went away (unloaded or
            // restarted): initialise NVML again (after the backoff).
            return Ok(true);
        }
        if !waited {
            // No wait lasted its timeout (errors, or events back to back):
            // pause, so that nothing the library does can make this spin.
            std::thread::sleep(MIN_WAIT.max(wait / 4));
        }
    }
}

fn register_missing<'n>(nvml: &'n Nvml, count: u32, slots: &mut Vec<Slot<'n>>) {
    for index in 0..count {
        if slots.iter().any(|s| s.index == index) {
            continue;
        }
        let Ok(device) = nvml.device_by_index(index) else {
            continue;
        };
        let Ok(uuid) = device.uuid() else { continue };
        let types = match device.supported_event_types() {
            Ok(t) => t & wanted(),
            Err(_) => EventTypes::CRITICAL_XID_ERROR,
        };
        if types.is_empty() {
            continue;
        }
        let Ok(set) = nvml.create_event_set() else {
            continue;
        };
        // On failure the set is freed and consumed.
        match device.register_events(types, set) {
            Ok(set) => {
                tracing::debug!(gpu = index, events = ?types, "NVML events registered");
                slots.push(Slot { index, uuid, set });
            }
            Err(err) => {
                tracing::debug!(gpu = index, error = %err.error, "NVML events: registration failed");
            }
        }
    }
    slots.sort_by_key(|s| s.index);
}

fn report(slot: &Slot, data: &EventData) -> Option<XidReport> {
    if !data.event_type.contains(EventTypes::CRITICAL_XID_ERROR) {
        // ECC events: the counters the sampler reads say the rest.
        return None;
    }
    let xid = match data.event_data {
        Some(XidError::Value(v)) => u32::try_from(v).unwrap_or(u32::MAX),
        Some(XidError::Unknown) | None => 999,
    };
    Some(XidReport {
        at_seconds: unix_seconds(SystemTime::now()),
        gpu: GpuRef::Uuid(slot.uuid.clone()),
        xid,
        source: FaultSource::Nvml,
        pid: None,
        comm: None,
        detail: String::new(),
    })
}
