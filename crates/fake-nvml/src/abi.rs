//! C layouts from `nvml.h` and helpers that write results through caller pointers.

use std::ffi::{CStr, c_char, c_uint};

use crate::codes::{INSUFFICIENT_SIZE, INVALID_ARGUMENT, Ret};

/// `nvmlUtilization_t`.
#[repr(C)]
pub struct Utilization {
    pub gpu: c_uint,
    pub memory: c_uint,
}

/// `nvmlMemory_t` (v1).
#[repr(C)]
pub struct MemoryV1 {
    pub total: u64,
    pub free: u64,
    pub used: u64,
}

/// `nvmlMemory_v2_t`.
#[repr(C)]
pub struct MemoryV2 {
    pub version: c_uint,
    pub total: u64,
    pub reserved: u64,
    pub free: u64,
    pub used: u64,
}

/// `NVML_STRUCT_VERSION(Memory, 2)`.
pub const MEMORY_V2_VERSION: c_uint = 0x0200_0028;

/// `nvmlPciInfo_t` as filled by `nvmlDeviceGetPciInfo_v2` and `_v3`.
#[repr(C)]
pub struct PciInfo {
    pub bus_id_legacy: [c_char; 16],
    pub domain: c_uint,
    pub bus: c_uint,
    pub device: c_uint,
    pub pci_device_id: c_uint,
    pub pci_sub_system_id: c_uint,
    pub bus_id: [c_char; 32],
}

/// The original `nvmlPciInfo_t`, filled by the unversioned `nvmlDeviceGetPciInfo`.
#[repr(C)]
pub struct PciInfoV1 {
    pub bus_id: [c_char; 16],
    pub domain: c_uint,
    pub bus: c_uint,
    pub device: c_uint,
    pub pci_device_id: c_uint,
    pub pci_sub_system_id: c_uint,
    pub reserved: [c_uint; 4],
}

/// `nvmlProcessInfo_v1_t`: records of the unversioned running-process calls.
#[repr(C)]
pub struct ProcessInfoV1 {
    pub pid: c_uint,
    pub used_gpu_memory: u64,
}

/// `nvmlProcessInfo_v2_t`: records of the `_v2` and `_v3` running-process calls.
#[repr(C)]
pub struct ProcessInfoV2 {
    pub pid: c_uint,
    pub used_gpu_memory: u64,
    pub gpu_instance_id: c_uint,
    pub compute_instance_id: c_uint,
}

/// `nvmlProcessUtilizationSample_t`.
#[repr(C)]
pub struct ProcessUtilizationSample {
    pub pid: c_uint,
    pub time_stamp: u64,
    pub sm_util: c_uint,
    pub mem_util: c_uint,
    pub enc_util: c_uint,
    pub dec_util: c_uint,
}

/// `nvmlBAR1Memory_t`.
#[repr(C)]
pub struct Bar1Memory {
    pub total: u64,
    pub free: u64,
    pub used: u64,
}

/// `nvmlFieldValue_t`.
#[repr(C)]
pub struct FieldValue {
    pub field_id: c_uint,
    pub scope_id: c_uint,
    pub timestamp: i64,
    pub latency_usec: i64,
    pub value_type: c_uint,
    pub nvml_return: Ret,
    pub value: u64,
}

/// `nvmlDeviceAttributes_t`, filled by `nvmlDeviceGetAttributes` and `_v2`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeviceAttributes {
    pub multiprocessor_count: c_uint,
    pub shared_copy_engine_count: c_uint,
    pub shared_decoder_count: c_uint,
    pub shared_encoder_count: c_uint,
    pub shared_jpeg_count: c_uint,
    pub shared_ofa_count: c_uint,
    pub gpu_instance_slice_count: c_uint,
    pub compute_instance_slice_count: c_uint,
    pub memory_size_mb: u64,
}

/// `nvmlTemperature_v1_t`.
#[repr(C)]
pub struct TemperatureV1 {
    pub version: c_uint,
    pub sensor_type: c_uint,
    pub temperature: i32,
}

/// `NVML_STRUCT_VERSION(Temperature, 1)`.
pub const TEMPERATURE_V1_VERSION: c_uint = 0x0100_000C;

const _: () = {
    use std::mem::size_of;
    assert!(size_of::<MemoryV1>() == 24);
    assert!(size_of::<MemoryV2>() == 40);
    assert!(size_of::<PciInfo>() == 68);
    assert!(size_of::<PciInfoV1>() == 52);
    assert!(size_of::<ProcessInfoV1>() == 16);
    assert!(size_of::<ProcessInfoV2>() == 24);
    assert!(size_of::<ProcessUtilizationSample>() == 32);
    assert!(size_of::<FieldValue>() == 40);
    assert!(size_of::<TemperatureV1>() == 12);
    assert!(size_of::<DeviceAttributes>() == 40);
};

/// Writes `value` through `ptr`.
///
/// # Safety
/// `ptr` is null or valid for a write of `T`.
pub unsafe fn put<T>(ptr: *mut T, value: T) -> Result<(), Ret> {
    if ptr.is_null() {
        return Err(INVALID_ARGUMENT);
    }
    // SAFETY: non-null, and valid for writes per the caller's contract.
    unsafe { ptr.write_unaligned(value) };
    Ok(())
}

/// Copies `text` and a NUL into the caller's buffer of `len` bytes.
///
/// # Safety
/// `buf` is null or valid for writes of `len` bytes.
pub unsafe fn put_str(buf: *mut c_char, len: c_uint, text: &str) -> Result<(), Ret> {
    if buf.is_null() {
        return Err(INVALID_ARGUMENT);
    }
    let bytes = text.as_bytes();
    if bytes.len() >= len as usize {
        return Err(INSUFFICIENT_SIZE);
    }
    // SAFETY: `bytes.len() + 1 <= len` bytes fit in the caller's buffer.
    unsafe {
        std::ptr::copy_nonoverlapping(bytes.as_ptr().cast::<c_char>(), buf, bytes.len());
        buf.add(bytes.len()).write(0);
    }
    Ok(())
}

/// A fixed-size C string field holding `text` (cut to fit, always NUL-terminated).
pub fn c_array<const N: usize>(text: &str) -> [c_char; N] {
    let mut out = [0 as c_char; N];
    for (slot, byte) in out.iter_mut().zip(text.bytes().take(N.saturating_sub(1))) {
        *slot = byte as c_char;
    }
    out
}

/// Reads a caller's NUL-terminated string.
///
/// # Safety
/// `ptr` is null or points to a NUL-terminated string.
pub unsafe fn get_str<'a>(ptr: *const c_char) -> Result<&'a str, Ret> {
    if ptr.is_null() {
        return Err(INVALID_ARGUMENT);
    }
    // SAFETY: per the caller's contract.
    unsafe { CStr::from_ptr(ptr) }
        .to_str()
        .map_err(|_| INVALID_ARGUMENT)
}

/// The count-then-fill protocol: `*count` is the capacity of `out` on entry and the
/// number of records on return; too small a buffer answers `INSUFFICIENT_SIZE`.
///
/// # Safety
/// `count` is null or valid; `out` is null or valid for `*count` records.
pub unsafe fn fill<T>(count: *mut c_uint, out: *mut T, records: Vec<T>) -> Result<(), Ret> {
    if count.is_null() {
        return Err(INVALID_ARGUMENT);
    }
    // SAFETY: non-null, per the contract.
    let capacity = unsafe { count.read_unaligned() } as usize;
    let n = records.len();
    unsafe { count.write_unaligned(n as c_uint) };
    if n == 0 {
        return Ok(());
    }
    if out.is_null() || capacity < n {
        return Err(INSUFFICIENT_SIZE);
    }
    for (i, record) in records.into_iter().enumerate() {
        // SAFETY: `i < n <= capacity`.
        unsafe { out.add(i).write_unaligned(record) };
    }
    Ok(())
}
