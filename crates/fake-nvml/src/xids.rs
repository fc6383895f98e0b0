//! Scripted Xid errors: NVML's event calls (`nvmlEventSetCreate`,
//! `nvmlDeviceRegisterEvents`, `nvmlDeviceGetSupportedEventTypes`,
//! `nvmlEventSetWait_v2`, `nvmlEventSetFree`) deliver them, and the library
//! appends the driver's kernel-log line for each to the scenario's
//! `kernel_log` file, as the driver does.
//!
//! An Xid happens `at_ms` after the scenario version that lists it was
//! loaded. Each is delivered once to every event set registered for its
//! GPU, and written once to the kernel log; entries are told apart by GPU,
//! position and content, so rewriting the file does not repeat them.

use std::collections::{BTreeSet, HashSet};
use std::ffi::c_uint;
use std::io::Write;
use std::sync::Mutex;
use std::thread;
use std::time::{Duration, Instant};

use crate::abi::put;
use crate::call::{Handle, device_call, guard, handle_for, settle};
use crate::codes::{GPU_IS_LOST, INVALID_ARGUMENT, NOT_SUPPORTED, Ret};
use crate::scenario::{Feature, Xid};
use crate::state::{self, Loaded};

pub const TIMEOUT: Ret = 10;

/// `nvmlEventTypeSingleBitEccError`, `...DoubleBitEccError`, `...XidCriticalError`.
const SUPPORTED: u64 = 0x1 | 0x2 | 0x8;
const XID_CRITICAL: u64 = 0x8;
/// How often a waiting call looks at the scenario file again (it also wakes
/// when a scripted Xid falls due).
const SLICE: Duration = Duration::from_millis(250);

/// One Xid entry: GPU index, position in its list, and the entry.
type Key = (usize, usize, Xid);

struct Set {
    id: usize,
    /// GPU index and the event mask registered for it.
    devices: Vec<(usize, u64)>,
    delivered: HashSet<Key>,
}

struct Events {
    next_id: usize,
    sets: Vec<Set>,
    logged: BTreeSet<Key>,
}

static EVENTS: Mutex<Events> = Mutex::new(Events {
    next_id: 1,
    sets: Vec::new(),
    logged: BTreeSet::new(),
});

fn events() -> std::sync::MutexGuard<'static, Events> {
    EVENTS.lock().unwrap_or_else(|p| p.into_inner())
}

/// The Xids due now on GPU `index`.
fn due(loaded: &Loaded, index: usize) -> Vec<Key> {
    let Some(gpu) = loaded.gpu(index) else {
        return Vec::new();
    };
    let age = loaded.age();
    gpu.xids
        .iter()
        .enumerate()
        .filter(|(_, x)| Duration::from_millis(x.at_ms) <= age)
        .map(|(i, x)| (index, i, x.clone()))
        .collect()
}

/// Appends the kernel-log lines of every Xid that is due and not yet written.
/// Called from the calls a sampler makes, so lines appear within a sample.
pub fn write_kernel_log(loaded: &Loaded) {
    let Some(path) = &loaded.scenario.kernel_log else {
        return;
    };
    let mut ev = events();
    let mut lines = String::new();
    for index in 0..loaded.scenario.gpus.len() {
        for key in due(loaded, index) {
            if !key.2.kernel_log || ev.logged.contains(&key) {
                continue;
            }
            let gpu = &loaded.scenario.gpus[index];
            let x = &key.2;
            let who = match x.pid {
                Some(pid) => format!("pid={pid}, name={}", x.name.as_deref().unwrap_or("python")),
                None => "pid='<unknown>', name=<unknown>".to_owned(),
            };
            let message = x.message.as_deref().unwrap_or("scripted Xid");
            lines.push_str(&format!(
                "NVRM: Xid (PCI:{:04x}:{:02x}:{:02x}): {}, {who}, {message}\n",
                gpu.pci.domain, gpu.pci.bus, gpu.pci.device, x.xid
            ));
            ev.logged.insert(key);
        }
    }
    if !lines.is_empty()
        && let Ok(mut f) = std::fs::OpenOptions::new()
            .append(true)
            .create(true)
            .open(path)
    {
        let _ = f.write_all(lines.as_bytes());
    }
}

fn set_index(ev: &Events, set: Handle) -> Result<usize, Ret> {
    let id = set as usize;
    ev.sets
        .iter()
        .position(|s| s.id == id)
        .ok_or(INVALID_ARGUMENT)
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlEventSetCreate(set: *mut Handle) -> Ret {
    guard(|| {
        drop(settle(
            state::lock_ready()?,
            "nvmlEventSetCreate",
            None,
            state::lock_ready,
        )?);
        let mut ev = events();
        let id = ev.next_id;
        ev.next_id += 1;
        ev.sets.push(Set {
            id,
            devices: Vec::new(),
            delivered: HashSet::new(),
        });
        // SAFETY: `set` is null or valid for a write.
        unsafe { put(set, id as Handle) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlEventSetFree(set: Handle) -> Ret {
    guard(|| {
        let mut ev = events();
        let i = set_index(&ev, set)?;
        ev.sets.remove(i);
        Ok(())
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetSupportedEventTypes(device: Handle, types: *mut u64) -> Ret {
    device_call(
        "nvmlDeviceGetSupportedEventTypes",
        device,
        Some(Feature::Events),
        |_, _, _| unsafe { put(types, SUPPORTED) },
    )
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceRegisterEvents(device: Handle, types: u64, set: Handle) -> Ret {
    device_call(
        "nvmlDeviceRegisterEvents",
        device,
        Some(Feature::Events),
        |loaded, index, _| {
            if types & !SUPPORTED != 0 {
                return Err(NOT_SUPPORTED);
            }
            let mut ev = events();
            let i = set_index(&ev, set)?;
            // Xids already due are history to a new registration.
            let past = due(loaded, index);
            let s = &mut ev.sets[i];
            s.devices.retain(|(d, _)| *d != index);
            s.devices.push((index, types));
            s.delivered.extend(past);
            Ok(())
        },
    )
}

/// `nvmlEventData_t`: 32 bytes.
#[repr(C)]
pub struct EventData {
    pub device: Handle,
    pub event_type: u64,
    pub event_data: u64,
    pub gpu_instance_id: c_uint,
    pub compute_instance_id: c_uint,
}

const _: () = assert!(size_of::<EventData>() == 32);

/// What one look at the set found.
enum Look {
    Event(EventData),
    Lost,
    /// Nothing now; the next scripted Xid falls due after this long.
    Nothing(Option<Duration>),
}

fn look(set: Handle) -> Result<Look, Ret> {
    let st = settle(
        state::lock_ready()?,
        "nvmlEventSetWait_v2",
        None,
        state::lock_ready,
    )?;
    let loaded = st.current()?;
    write_kernel_log(loaded);
    let mut ev = events();
    let i = set_index(&ev, set)?;
    let devices = ev.sets[i].devices.clone();
    let age = loaded.age();
    let next_due = devices
        .iter()
        .filter_map(|(index, _)| loaded.gpu(*index))
        .flat_map(|g| g.xids.iter())
        .map(|x| Duration::from_millis(x.at_ms))
        .filter(|at| *at > age)
        .min()
        .map(|at| at - age);
    for (index, mask) in devices {
        let Some(gpu) = loaded.gpu(index) else {
            continue;
        };
        if gpu.lost {
            return Ok(Look::Lost);
        }
        if mask & XID_CRITICAL == 0 {
            continue;
        }
        let next = due(loaded, index)
            .into_iter()
            .find(|k| k.2.nvml_event && !ev.sets[i].delivered.contains(k));
        if let Some(key) = next {
            let data = EventData {
                device: handle_for(index),
                event_type: XID_CRITICAL,
                event_data: key.2.xid,
                gpu_instance_id: c_uint::MAX,
                compute_instance_id: c_uint::MAX,
            };
            ev.sets[i].delivered.insert(key);
            return Ok(Look::Event(data));
        }
    }
    Ok(Look::Nothing(next_due))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlEventSetWait_v2(
    set: Handle,
    data: *mut EventData,
    timeout_ms: c_uint,
) -> Ret {
    guard(|| {
        if data.is_null() {
            return Err(INVALID_ARGUMENT);
        }
        let deadline = Instant::now() + Duration::from_millis(u64::from(timeout_ms));
        loop {
            let next_due = match look(set)? {
                // SAFETY: `data` is valid for a write.
                Look::Event(d) => return unsafe { put(data, d) },
                Look::Lost => return Err(GPU_IS_LOST),
                Look::Nothing(next_due) => next_due,
            };
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(TIMEOUT);
            }
            thread::sleep(left.min(SLICE).min(next_due.unwrap_or(SLICE)));
        }
    })
}
