//! Raw C calls, for what nvml-wrapper does not reach: unversioned symbols and v1
//! layouts, the count-then-fill protocol, version checks, the pynvml/nvitop group.

mod common;

use std::ffi::{CStr, c_char};
use std::mem::zeroed;
use std::ptr::null_mut;

use common::{ScenarioFile, init};
use nvml_wrapper::struct_wrappers::device::FieldValueSample;
use nvml_wrapper::structs::device::FieldId;
use nvml_wrapper_sys::bindings::*;
use serde_json::json;

const GIB: u64 = 1 << 30;

#[test]
fn raw_calls_follow_nvml_h() {
    let file = ScenarioFile::new("abi");
    file.write(&json!({"gpus": [{
        "memory_total_bytes": 80 * GIB, "memory_used_bytes": GIB, "memory_reserved_bytes": GIB / 2,
        "temperature_c": 44,
        "processes": [
            {"pid": 7, "used_memory_bytes": 100},
            {"pid": 8, "used_memory_bytes": 200, "sm_util": 10},
            {"pid": 9, "used_memory_bytes": 300, "type": "graphics"}
        ]
    }]}));
    let nvml = init();
    let lib = nvml.lib();
    let dev = nvml.device_by_index(0).unwrap();
    let fields = dev
        .field_values_for(&[
            FieldId(nvml_wrapper::sys_exports::field_id::NVML_FI_DEV_POWER_INSTANT),
            FieldId(nvml_wrapper::sys_exports::field_id::NVML_FI_DEV_POWER_AVERAGE),
        ])
        .unwrap();
    let sample: &FieldValueSample = fields[0].as_ref().unwrap();
    assert!(matches!(
        sample.value,
        Ok(nvml_wrapper::enums::device::SampleValue::U32(70_000))
    ));
    assert!(sample.timestamp > 0);
    let sample: &FieldValueSample = fields[1].as_ref().unwrap();
    assert!(matches!(
        sample.value,
        Err(nvml_wrapper::error::NvmlError::NotSupported)
    ));

    // SAFETY: calls into the loaded library with valid pointers and buffer sizes.
    unsafe {
        let d = dev.handle();
        let text = |p: *const c_char| CStr::from_ptr(p).to_str().unwrap().to_owned();
        assert_eq!(text(lib.nvmlErrorString(15)), "GPU is lost");
        assert_eq!(text(lib.nvmlErrorString(12345)), "Unknown Error");

        // Unversioned variants.
        assert_eq!(lib.nvmlInitWithFlags(0), 0);
        assert_eq!(lib.nvmlInit(), 0);
        let (mut count, mut h): (u32, nvmlDevice_t) = (0, null_mut());
        assert_eq!(lib.nvmlDeviceGetCount(&mut count), 0);
        assert_eq!(count, 1);
        assert_eq!(lib.nvmlDeviceGetHandleByIndex(0, &mut h), 0);
        assert_eq!(h, d);
        let mut cuda = 0;
        assert_eq!(lib.nvmlSystemGetCudaDriverVersion(&mut cuda), 0);
        assert_eq!(cuda, 12040);
        let mut pci: nvmlPciInfo_t = zeroed();
        assert_eq!(lib.nvmlDeviceGetPciInfo_v3(d, &mut pci), 0);
        assert_eq!(text(pci.busIdLegacy.as_ptr()), "0000:10:00.0");
        assert_eq!(text(pci.busId.as_ptr()), "00000000:10:00.0");

        // Bad handles and small buffers.
        let mut util: nvmlUtilization_t = zeroed();
        assert_eq!(lib.nvmlDeviceGetUtilizationRates(null_mut(), &mut util), 2);
        assert_eq!(
            lib.nvmlDeviceGetUtilizationRates(d.wrapping_byte_add(1), &mut util),
            2
        );
        assert_eq!(lib.nvmlDeviceGetUtilizationRates(d, null_mut()), 2);
        let mut name = [0 as c_char; 8];
        assert_eq!(lib.nvmlDeviceGetName(d, name.as_mut_ptr(), 8), 7);

        // Memory: v1 counts reserved as used; v2 checks its version.
        let mut m1: nvmlMemory_t = zeroed();
        assert_eq!(lib.nvmlDeviceGetMemoryInfo(d, &mut m1), 0);
        assert_eq!(
            (m1.total, m1.used, m1.free),
            (80 * GIB, GIB + GIB / 2, 80 * GIB - GIB - GIB / 2)
        );
        let mut m2: nvmlMemory_v2_t = zeroed();
        assert_eq!(lib.nvmlDeviceGetMemoryInfo_v2(d, &mut m2), 25);
        m2.version = 0x0200_0028;
        assert_eq!(lib.nvmlDeviceGetMemoryInfo_v2(d, &mut m2), 0);
        assert_eq!(
            (m2.used, m2.reserved, m2.free),
            (GIB, GIB / 2, 80 * GIB - GIB - GIB / 2)
        );

        // Temperature, versioned.
        let mut t: nvmlTemperature_t = zeroed();
        t.version = 0x0100_000C;
        assert_eq!(lib.nvmlDeviceGetTemperatureV(d, &mut t), 0);
        assert_eq!(t.temperature, 44);

        // Count-then-fill, v1 (16-byte) records.
        let mut n = 0;
        assert_eq!(
            lib.nvmlDeviceGetComputeRunningProcesses(d, &mut n, null_mut()),
            7
        );
        assert_eq!(n, 2);
        let mut v1: [nvmlProcessInfo_v1_t; 2] = zeroed();
        assert_eq!(
            lib.nvmlDeviceGetComputeRunningProcesses(d, &mut n, v1.as_mut_ptr()),
            0
        );
        assert_eq!(
            [
                (v1[0].pid, v1[0].usedGpuMemory),
                (v1[1].pid, v1[1].usedGpuMemory)
            ],
            [(7, 100), (8, 200)]
        );
        // v2/v3 (24-byte) records; a buffer too small answers INSUFFICIENT_SIZE with the count.
        let mut v2: [nvmlProcessInfo_t; 4] = zeroed();
        n = 1;
        assert_eq!(
            lib.nvmlDeviceGetComputeRunningProcesses_v3(d, &mut n, v2.as_mut_ptr()),
            7
        );
        assert_eq!(n, 2);
        n = 4;
        assert_eq!(
            lib.nvmlDeviceGetGraphicsRunningProcesses_v2(d, &mut n, v2.as_mut_ptr()),
            0
        );
        assert_eq!(
            (n, v2[0].pid, v2[0].usedGpuMemory, v2[0].gpuInstanceId),
            (1, 9, 300, u32::MAX)
        );
        n = 4;
        assert_eq!(
            lib.nvmlDeviceGetGraphicsRunningProcesses(d, &mut n, v1.as_mut_ptr()),
            0
        );
        assert_eq!((n, v1[0].pid), (1, 9));

        // Process utilization: the size query with a null buffer.
        n = 0;
        assert_eq!(
            lib.nvmlDeviceGetProcessUtilization(d, null_mut(), &mut n, 0),
            7
        );
        assert_eq!(n, 1);

        // The group pynvml-based tools read.
        let (mut a, mut b) = (5u32, 5u32);
        assert_eq!(lib.nvmlDeviceGetMigMode(d, &mut a, &mut b), 3);
        assert_eq!(lib.nvmlDeviceIsMigDeviceHandle(d, &mut a), 0);
        assert_eq!(a, 0);
        assert_eq!(lib.nvmlDeviceGetEncoderUtilization(d, &mut a, &mut b), 0);
        assert_eq!(lib.nvmlDeviceGetDecoderUtilization(d, &mut a, &mut b), 0);
        assert_eq!(a, 0);
        assert_eq!(lib.nvmlDeviceGetPerformanceState(d, &mut a), 0);
        assert_eq!(lib.nvmlDeviceGetPersistenceMode(d, &mut a), 0);
        assert_eq!(a, 1);
        assert_eq!(lib.nvmlDeviceGetComputeMode(d, &mut a), 0);
        assert_eq!(lib.nvmlDeviceGetDisplayMode(d, &mut a), 0);
        let (mut major, mut minor) = (0, 0);
        assert_eq!(
            lib.nvmlDeviceGetCudaComputeCapability(d, &mut major, &mut minor),
            0
        );
        assert_eq!((major, minor), (9, 0));
        let mut bar1: nvmlBAR1Memory_t = zeroed();
        assert_eq!(lib.nvmlDeviceGetBAR1MemoryInfo(d, &mut bar1), 0);
        assert_eq!(bar1.bar1Total, 128 * GIB);
        assert_eq!(lib.nvmlDeviceGetMemoryBusWidth(d, &mut a), 0);
        assert_eq!(a, 5120);

        assert_eq!(lib.nvmlShutdown(), 0);
        assert_eq!(lib.nvmlShutdown(), 0);
    }
}
