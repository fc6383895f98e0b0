//! MIG through nvml-wrapper: mode, instance handles and what they answer,
//! GPM per instance, and instances that go away when the scenario changes.

mod common;

use std::thread::sleep;
use std::time::Duration;

use common::{ScenarioFile, init};
use nvml_wrapper::enums::device::UsedGpuMemory;
use nvml_wrapper::enums::gpm::GpmMetricId;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::gpm::gpm_metrics_get;
use serde_json::{Value, json};

const GIB: u64 = 1 << 30;

fn scenario(instances: Value) -> Value {
    json!({"gpus": [
        {"gpm": {"sm_util": 50.0}, "utilization_gpu": 80, "mig": instances},
        {"utilization_gpu": 30}
    ]})
}

#[test]
fn mig_instances_answer_as_devices() {
    let file = ScenarioFile::new("mig");
    file.write(&scenario(json!([
        {"gpu_instance_id": 1, "memory_total_bytes": 20 * GIB, "memory_used_bytes": 3 * GIB,
         "processes": [{"pid": 4242, "used_memory_bytes": 3 * GIB}],
         "gpm": {"sm_util": 2.5, "any_tensor_util": 0.0}},
        {"gpu_instance_id": 2, "compute_instance_id": 0, "profile": "3g.40gb",
         "uuid": "MIG-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee"}
    ])));
    let nvml = init();
    let parent = nvml.device_by_index(0).unwrap();
    let plain = nvml.device_by_index(1).unwrap();

    // Mode and counts; a GPU without MIG says so.
    let mode = parent.mig_mode().unwrap();
    assert_eq!((mode.current, mode.pending), (1, 1));
    assert!(matches!(plain.mig_mode(), Err(NvmlError::NotSupported)));
    assert_eq!(parent.mig_device_count().unwrap(), 7);
    // With MIG on, the parent has no utilization.gpu; the other GPU does.
    assert!(matches!(
        parent.utilization_rates(),
        Err(NvmlError::NotSupported)
    ));
    assert_eq!(plain.utilization_rates().unwrap().gpu, 30);

    let a = parent.mig_device_by_index(0).unwrap();
    let b = parent.mig_device_by_index(1).unwrap();
    assert!(matches!(
        parent.mig_device_by_index(2),
        Err(NvmlError::NotFound)
    ));
    assert!(matches!(
        parent.mig_device_by_index(7),
        Err(NvmlError::InvalidArg)
    ));
    assert!(a.mig_is_mig_device_handle().unwrap());
    assert!(!parent.mig_is_mig_device_handle().unwrap());
    assert_eq!(
        a.mig_parent_device().unwrap().uuid().unwrap(),
        parent.uuid().unwrap()
    );

    // Identity, memory, processes of each instance.
    assert_eq!(
        a.uuid().unwrap(),
        "MIG-00000000-0000-4000-8000-000000010000"
    );
    assert_eq!(
        b.uuid().unwrap(),
        "MIG-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee"
    );
    assert_eq!(b.name().unwrap(), "NVIDIA H100 80GB HBM3 MIG 3g.40gb");
    let mem = a.memory_info().unwrap();
    assert_eq!((mem.total, mem.used), (20 * GIB, 3 * GIB));
    let procs = a.running_compute_processes().unwrap();
    assert_eq!(procs.len(), 1);
    assert_eq!(procs[0].pid, 4242);
    assert_eq!(procs[0].used_gpu_memory, UsedGpuMemory::Used(3 * GIB));
    assert_eq!(procs[0].gpu_instance_id, Some(1));
    assert_eq!(procs[0].compute_instance_id, Some(0));
    assert!(b.running_compute_processes().unwrap().is_empty());
    assert!(matches!(
        a.utilization_rates(),
        Err(NvmlError::NotSupported)
    ));

    // Instance IDs through the raw calls (nvml-wrapper has no wrapper for them).
    let lib = nvml.lib();
    let mut gi = 0u32;
    let mut ci = 7u32;
    unsafe {
        assert_eq!(
            (lib.nvmlDeviceGetGpuInstanceId.as_ref().unwrap())(b.handle(), &mut gi),
            0
        );
        assert_eq!(
            (lib.nvmlDeviceGetComputeInstanceId.as_ref().unwrap())(b.handle(), &mut ci),
            0
        );
    }
    assert_eq!((gi, ci), (2, 0));

    // GPM per instance: its own values; an instance without gpm, or an unknown
    // instance ID, has none.
    let first = parent.gpm_mig_sample(1).unwrap();
    sleep(Duration::from_millis(120));
    let second = parent.gpm_mig_sample(1).unwrap();
    let got = gpm_metrics_get(&nvml, &first, &second, &[GpmMetricId::SmUtil]).unwrap();
    assert_eq!(got[0].as_ref().unwrap().value, 2.5);
    assert!(matches!(
        parent.gpm_mig_sample(2),
        Err(NvmlError::NotSupported)
    ));
    assert!(matches!(
        parent.gpm_mig_sample(9),
        Err(NvmlError::InvalidArg)
    ));
    // A whole-GPU sample and an instance sample do not mix.
    let whole = parent.gpm_sample().unwrap();
    assert!(matches!(
        gpm_metrics_get(&nvml, &first, &whole, &[GpmMetricId::SmUtil]),
        Err(NvmlError::InvalidArg)
    ));

    // Attributes: the slices from the profile (3g: 3, 16 SMs a slice), none
    // without a profile or `slices`; a whole GPU has none, as on a real driver.
    let attrs = b.attributes().unwrap();
    assert_eq!(
        (
            attrs.gpu_instance_slice_count,
            attrs.compute_instance_slice_count,
            attrs.multiprocessor_count,
            attrs.memory_size_mb
        ),
        (3, 3, 48, 10 * 1024)
    );
    assert_eq!(attrs.shared_copy_engine_count, 0);
    assert!(matches!(a.attributes(), Err(NvmlError::NotSupported)));
    assert!(matches!(parent.attributes(), Err(NvmlError::NotSupported)));
    assert!(matches!(plain.attributes(), Err(NvmlError::NotSupported)));
    // The unversioned symbol fills the same layout.
    let mut raw: nvml_wrapper_sys::bindings::nvmlDeviceAttributes_t = unsafe { std::mem::zeroed() };
    unsafe {
        assert_eq!(
            (lib.nvmlDeviceGetAttributes.as_ref().unwrap())(b.handle(), &mut raw),
            0
        );
    }
    assert_eq!(
        (raw.gpuInstanceSliceCount, raw.memorySizeMB),
        (3, 10 * 1024)
    );
    // `slices` given; a compute instance smaller than its GPU instance.
    file.write(&scenario(json!([
        {"gpu_instance_id": 1, "slices": 2, "memory_total_bytes": 20 * GIB},
        {"gpu_instance_id": 2, "profile": "1c.3g.40gb"}
    ])));
    let attrs = a.attributes().unwrap();
    assert_eq!(
        (
            attrs.gpu_instance_slice_count,
            attrs.compute_instance_slice_count,
            attrs.multiprocessor_count,
            attrs.memory_size_mb
        ),
        (2, 2, 32, 20 * 1024)
    );
    let attrs = b.attributes().unwrap();
    assert_eq!(
        (
            attrs.gpu_instance_slice_count,
            attrs.compute_instance_slice_count,
            attrs.multiprocessor_count
        ),
        (3, 1, 16)
    );
    // A lost parent: its instances answer as lost.
    let mut lost = scenario(json!([{"gpu_instance_id": 1, "slices": 2}]));
    lost["gpus"][0]["lost"] = json!(true);
    file.write(&lost);
    assert!(matches!(a.attributes(), Err(NvmlError::GpuLost)));

    // Reconfigured: instance 2 is gone, its handle invalid.
    file.write(&scenario(json!([{"gpu_instance_id": 1}])));
    assert!(matches!(b.uuid(), Err(NvmlError::InvalidArg)));
    assert!(matches!(
        parent.mig_device_by_index(1),
        Err(NvmlError::NotFound)
    ));
    // MIG off: no MIG queries, utilization back.
    file.write(&json!({"gpus": [{"utilization_gpu": 80}, {}]}));
    assert!(matches!(parent.mig_mode(), Err(NvmlError::NotSupported)));
    assert!(matches!(a.uuid(), Err(NvmlError::InvalidArg)));
    assert_eq!(parent.utilization_rates().unwrap().gpu, 80);
}
