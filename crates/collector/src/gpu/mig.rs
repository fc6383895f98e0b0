//! MIG instances as GPUs. With MIG mode on, a GPU's own `utilization.gpu` is
//! not supported and its processes belong to instances: each instance is
//! read through its own device handle (UUID, name, memory, processes) and
//! its activity from GPM (`nvmlGpmMigSampleGet` on the parent), and reported
//! as a GPU of its own (`MigIdentity`, index from `mig_index`).
//!
//! Instances that appear or go away between readings (MIG reconfigured) are
//! GPUs appearing and disappearing; their GPM memos are freed.
//!
//! Each instance carries its share of the physical GPU for the GPU-time
//! ledger: its GPU instance slices (`nvmlDeviceGetAttributes` on its handle)
//! over the GPU's (`nvmlDeviceGetMaxMigDeviceCount`: 7 on A100, H100, H200
//! and B200, 4 on A30), or, where the driver answers no attributes, its
//! memory over the GPU's. The parent keeps the slices no instance holds.

use std::collections::HashMap;

use nvml_wrapper::error::NvmlError;
use nvml_wrapper::{Device, Nvml};

use super::device::push_process;
use super::gpm::{self, GpmMemo};
use super::older::{self, Calls};
use crate::sample::{ErrorCounts, ErrorSource, GpuProcessKind, GpuSample, MigIdentity, mig_index};

/// GPM memos of MIG instances, by (parent index, GPU instance ID).
#[derive(Debug, Default)]
pub struct MigMemos {
    gpm: HashMap<(u32, u32), GpmMemo>,
}

impl MigMemos {
    /// Frees every kept sample (before the `Nvml` is dropped).
    pub fn release_all(&mut self, nvml: &Nvml) {
        for memo in self.gpm.values_mut() {
            memo.release(nvml);
        }
        self.gpm.clear();
    }

    /// Frees the memos of instances not in `seen` (gone or reconfigured).
    pub fn keep_only(&mut self, nvml: &Nvml, seen: &[(u32, u32)]) {
        self.gpm.retain(|key, memo| {
            let keep = seen.contains(key);
            if !keep {
                memo.release(nvml);
            }
            keep
        });
    }
}

/// The value, or `None`: silently for "not supported", a missing symbol, "not
/// found" and a lost GPU (the parent's reading says so), counted otherwise.
fn ok<T>(result: Result<T, NvmlError>, errors: &mut ErrorCounts) -> Option<T> {
    match result {
        Ok(v) => Some(v),
        Err(
            NvmlError::NotSupported
            | NvmlError::FunctionNotFound
            | NvmlError::FailedToLoadSymbol(_)
            | NvmlError::NotFound
            | NvmlError::GpuLost,
        ) => None,
        Err(_) => {
            errors.add(ErrorSource::Nvml);
            None
        }
    }
}

/// The GPU and compute instance IDs of a MIG device handle (raw calls:
/// nvml-wrapper has no wrapper for them).
fn instance_ids(nvml: &Nvml, device: &Device) -> Option<(u32, u32)> {
    let lib = nvml.lib();
    let (Ok(gi_of), Ok(ci_of)) = (
        lib.nvmlDeviceGetGpuInstanceId.as_ref(),
        lib.nvmlDeviceGetComputeInstanceId.as_ref(),
    ) else {
        return None;
    };
    let (mut gi, mut ci) = (0u32, 0u32);
    // SAFETY: `device` is a live handle of this library; the out-pointers
    // are valid for one u32 each.
    let (a, b) = unsafe {
        (
            gi_of(device.handle(), &mut gi),
            ci_of(device.handle(), &mut ci),
        )
    };
    (a == 0 && b == 0).then_some((gi, ci))
}

/// Reads the MIG instances of `parent` (GPU `parent_sample`). Empty when MIG
/// is off or not supported. Adds each instance's key to `seen`.
pub fn read_instances(
    nvml: &Nvml,
    calls: Calls,
    parent: &Device,
    parent_sample: &GpuSample,
    memos: &mut MigMemos,
    seen: &mut Vec<(u32, u32)>,
    errors: &mut ErrorCounts,
) -> Vec<GpuSample> {
    let enabled = ok(parent.mig_mode(), errors).is_some_and(|m| m.current == 1);
    if !enabled {
        return Vec::new();
    }
    let Some(slots) = ok(parent.mig_device_count(), errors) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    let parent_memory = parent_sample.memory_total_bytes.filter(|m| *m > 0);
    for slot in 0..slots {
        let Some(device) = ok(parent.mig_device_by_index(slot), errors) else {
            continue;
        };
        let Some((gi, ci)) = instance_ids(nvml, &device) else {
            errors.add(ErrorSource::Nvml);
            continue;
        };
        let Some(uuid) = ok(device.uuid(), errors) else {
            continue;
        };
        let memory = ok(older::memory_info(nvml, &device), errors);
        let mut processes = Vec::new();
        for kind in [
            GpuProcessKind::Compute,
            GpuProcessKind::Graphics,
            GpuProcessKind::Mps,
        ] {
            let list = ok(older::processes(nvml, &device, calls, kind), errors);
            for info in list.unwrap_or_default() {
                push_process(&mut processes, kind, &info);
            }
        }
        let share = ok(device.attributes(), errors)
            .filter(|a| a.gpu_instance_slice_count > 0 && slots > 0)
            .map(|a| f64::from(a.gpu_instance_slice_count) / f64::from(slots))
            .or_else(|| {
                let own = memory.as_ref()?.total as f64;
                Some(own / parent_memory? as f64)
            })
            .map(|s| s.clamp(0.0, 1.0));
        let key = (parent_sample.index, gi);
        seen.push(key);
        let memo = memos.gpm.entry(key).or_default();
        let activity = gpm::read_mig(nvml, parent, gi, memo, errors);
        out.push(GpuSample {
            index: mig_index(parent_sample.index, gi, ci),
            uuid,
            name: ok(device.name(), errors).unwrap_or_default(),
            pci_bus_id: parent_sample.pci_bus_id.clone(),
            up: true,
            memory_used_bytes: memory.as_ref().map(|m| m.used),
            memory_total_bytes: memory.as_ref().map(|m| m.total),
            processes,
            gpm_supported: memo.supported,
            gpm: activity.reading,
            share,
            mig: Some(MigIdentity {
                parent_index: parent_sample.index,
                parent_uuid: parent_sample.uuid.clone(),
                gpu_instance_id: gi,
                compute_instance_id: ci,
            }),
            ..GpuSample::default()
        });
    }
    out
}

/// The part of a MIG-enabled GPU that none of `instances` holds (slices not
/// made into instances), so that the GPU and its instances add up to one.
/// Compute instances of one GPU instance share its slices: the GPU instance
/// counts once, its share split evenly among them.
pub fn split_shares(instances: &mut [GpuSample]) -> f64 {
    let gi = |g: &GpuSample| g.mig.as_ref().map(|m| m.gpu_instance_id);
    let mut per_gi: HashMap<Option<u32>, (f64, usize)> = HashMap::new();
    for g in instances.iter() {
        let e = per_gi.entry(gi(g)).or_insert((g.share.unwrap_or(0.0), 0));
        e.1 += 1;
    }
    for g in instances.iter_mut() {
        let (share, n) = per_gi[&gi(g)];
        g.share = Some(share / n as f64);
    }
    let held: f64 = per_gi.values().map(|(share, _)| share).sum();
    (1.0 - held).max(0.0)
}
