//! ECC, page retirement, row remapping, NVLink error counters and the
//! recovery action: through field values (what the collector reads) and
//! through their own calls (what other clients use), from a GPU's `health`.

use std::ffi::c_uint;

use crate::abi::put;
use crate::call::{Handle, device_call};
use crate::codes::{INVALID_ARGUMENT, NOT_SUPPORTED, Ret};
use crate::scenario::{Gpu, Health};

/// `NVML_VALUE_TYPE_UNSIGNED_INT`, `..._UNSIGNED_LONG_LONG`.
const UINT: c_uint = 1;
const ULL: c_uint = 3;

/// The value type and value of field `id`, when the GPU has it.
pub fn field(gpu: &Gpu, id: c_uint) -> Option<(c_uint, u64)> {
    let h = gpu.health.as_ref()?;
    let flag = |b: bool| (UINT, u64::from(b));
    Some(match id {
        3 => (ULL, h.ecc_corrected),
        4 => (ULL, h.ecc_uncorrected),
        29 => (ULL, h.retired_pages_single_bit),
        30 => (ULL, h.retired_pages_double_bit),
        31 => flag(h.retired_pages_pending),
        38 => (ULL, h.nvlink_crc_flit_errors),
        45 => (ULL, h.nvlink_crc_data_errors),
        52 => (ULL, h.nvlink_replay_errors),
        59 => (ULL, h.nvlink_recovery_errors),
        142 => (UINT, h.remapped_rows_correctable),
        143 => (UINT, h.remapped_rows_uncorrectable),
        144 => flag(h.row_remap_pending),
        145 => flag(h.row_remap_failure),
        230 => (UINT, u64::from(h.recovery_action)),
        _ => return None,
    })
}

fn health(gpu: &Gpu) -> Result<&Health, Ret> {
    gpu.health.as_ref().ok_or(NOT_SUPPORTED)
}

/// Volatile and aggregate counts are the same here.
pub fn total_ecc(gpu: &Gpu, kind: c_uint) -> Result<u64, Ret> {
    let h = health(gpu)?;
    match kind {
        0 => Ok(h.ecc_corrected),
        1 => Ok(h.ecc_uncorrected),
        _ => Err(INVALID_ARGUMENT),
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetRemappedRows(
    device: Handle,
    correctable: *mut c_uint,
    uncorrectable: *mut c_uint,
    pending: *mut c_uint,
    failure: *mut c_uint,
) -> Ret {
    device_call("nvmlDeviceGetRemappedRows", device, None, |_, _, g| {
        let h = health(g)?;
        let n = |v: u64| c_uint::try_from(v).unwrap_or(c_uint::MAX);
        unsafe {
            put(correctable, n(h.remapped_rows_correctable))?;
            put(uncorrectable, n(h.remapped_rows_uncorrectable))?;
            put(pending, c_uint::from(h.row_remap_pending))?;
            put(failure, c_uint::from(h.row_remap_failure))
        }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetRetiredPagesPendingStatus(
    device: Handle,
    pending: *mut c_uint,
) -> Ret {
    device_call(
        "nvmlDeviceGetRetiredPagesPendingStatus",
        device,
        None,
        |_, _, g| unsafe { put(pending, c_uint::from(health(g)?.retired_pages_pending)) },
    )
}

/// Every count on link 0; other links have none.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetNvLinkErrorCounter(
    device: Handle,
    link: c_uint,
    counter: c_uint,
    value: *mut u64,
) -> Ret {
    device_call(
        "nvmlDeviceGetNvLinkErrorCounter",
        device,
        None,
        |_, _, g| {
            let h = health(g)?;
            let v = match counter {
                0 => h.nvlink_replay_errors,
                1 => h.nvlink_recovery_errors,
                2 => h.nvlink_crc_flit_errors,
                3 => h.nvlink_crc_data_errors,
                _ => return Err(INVALID_ARGUMENT),
            };
            unsafe { put(value, if link == 0 { v } else { 0 }) }
        },
    )
}

/// Pages retired for `cause` (0: multiple single-bit errors, 1: a double-bit
/// error), as many as `health` counts: made-up addresses and times.
fn retired(gpu: &Gpu, cause: c_uint) -> Result<Vec<(u64, u64)>, Ret> {
    let h = health(gpu)?;
    let n = match cause {
        0 => h.retired_pages_single_bit,
        1 => h.retired_pages_double_bit,
        _ => return Err(INVALID_ARGUMENT),
    };
    Ok((0..n.min(4096))
        .map(|i| {
            (
                (u64::from(cause) << 32) + 0x1000 * (i + 1),
                1_700_000_000 + i,
            )
        })
        .collect())
}

/// The count-then-fill protocol: a `count` too small for the pages answers
/// `INSUFFICIENT_SIZE` with the count needed.
///
/// # Safety
/// `count` is null or valid for a read and a write; `addresses` (and
/// `timestamps`, when not null) are valid for `*count` writes.
unsafe fn fill_pages(
    pages: Vec<(u64, u64)>,
    count: *mut c_uint,
    addresses: *mut u64,
    timestamps: *mut u64,
) -> Result<(), Ret> {
    if count.is_null() {
        return Err(INVALID_ARGUMENT);
    }
    let n = c_uint::try_from(pages.len()).unwrap_or(c_uint::MAX);
    // SAFETY: per this function's contract.
    unsafe {
        if *count < n {
            *count = n;
            return Err(crate::codes::INSUFFICIENT_SIZE);
        }
        if n > 0 && addresses.is_null() {
            return Err(INVALID_ARGUMENT);
        }
        for (i, (address, time)) in pages.into_iter().enumerate() {
            addresses.add(i).write_unaligned(address);
            if !timestamps.is_null() {
                timestamps.add(i).write_unaligned(time);
            }
        }
        *count = n;
    }
    Ok(())
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetRetiredPages(
    device: Handle,
    cause: c_uint,
    count: *mut c_uint,
    addresses: *mut u64,
) -> Ret {
    device_call(
        "nvmlDeviceGetRetiredPages",
        device,
        None,
        |_, _, g| unsafe { fill_pages(retired(g, cause)?, count, addresses, std::ptr::null_mut()) },
    )
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetRetiredPages_v2(
    device: Handle,
    cause: c_uint,
    count: *mut c_uint,
    addresses: *mut u64,
    timestamps: *mut u64,
) -> Ret {
    device_call(
        "nvmlDeviceGetRetiredPages_v2",
        device,
        None,
        |_, _, g| unsafe { fill_pages(retired(g, cause)?, count, addresses, timestamps) },
    )
}
