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
const MAX_RETRY: Duration = Duration::from_secs(60);
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
                backoff = FIRST_RETRY;
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
                        std::thread::sleep(MAX_RETRY);
                        continue;
                    }
                    None => logged = None,
                }
                if watch(&nvml, wait, &tx).is_err() {
                    return; // the sampler is gone
                }
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

/// Waits on the GPUs' sets until NVML must be initialised again (`Ok`) or
/// the receiver is gone (`Err`).
fn watch(nvml: &Nvml, wait: Duration, tx: &Sender<XidReport>) -> Result<(), ()> {
    let mut slots: Vec<Slot> = Vec::new();
    let mut next_register = Instant::now();
    let mut failures_in_a_row = 0u32;
    loop {
        if Instant::now() >= next_register {
            next_register = Instant::now() + REGISTER_EVERY;
            match nvml.device_count() {
                Ok(count) => register_missing(nvml, count, &mut slots),
                Err(err) => {
                    tracing::debug!(error = %err, "NVML events: device count failed; initialising again");
                    return Ok(());
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
        for (i, slot) in slots.iter().enumerate() {
            match slot.set.wait(ms) {
                Ok(data) => {
                    failures_in_a_row = 0;
                    if let Some(report) = report(slot, &data) {
                        tx.send(report).map_err(|_| ())?;
                    }
                }
                Err(NvmlError::Timeout) => failures_in_a_row = 0,
                Err(NvmlError::GpuLost) => {
                    tracing::warn!(
                        gpu = slot.index,
                        "NVML events: GPU lost; waiting for it to answer again"
                    );
                    failed.push(i);
                }
                Err(err) => {
                    tracing::debug!(gpu = slot.index, error = %err, "NVML events: wait failed");
                    failed.push(i);
                }
            }
        }
        if !failed.is_empty() {
            for i in failed.into_iter().rev() {
                slots.remove(i);
            }
            failures_in_a_row += 1;
            if slots.is_empty() && failures_in_a_row > 1 {
                // Every set failed twice running: the driver went away.
                std::thread::sleep(FIRST_RETRY);
                return Ok(());
            }
            // Errors come back at once: never loop on them without a pause.
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
