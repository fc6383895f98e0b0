//! Which ML framework a job runs, so that its hints speak the job's words
//! (`num_workers` to a PyTorch job, `tf.data` to a TensorFlow job, plain
//! words where it is not known). Three sources, strongest first:
//! - the job's Python stacks: the framework whose code the threads stand in;
//! - the names PyTorch gives its DataLoader's worker processes
//!   (`pt_data_worker`) and pin-memory thread (`pt_data_pin`);
//! - the framework libraries the job's leader has mapped (`libtorch_cpu.so`,
//!   `libtensorflow_framework.so`, `jaxlib/`).
//!
//! A job with two frameworks loaded (PyTorch's TensorBoard writer imports
//! TensorFlow where it is installed) is named only when its stacks or its
//! DataLoader's names settle it.

pub use crate::types::framework::{Framework, FrameworkEvidence};
use crate::types::reads::ThreadRead;

impl Framework {
    const ALL: [Framework; 3] = [Framework::Pytorch, Framework::Tensorflow, Framework::Jax];

    /// The framework a package-relative file of installed code belongs to
    /// (`torch/utils/data/dataloader.py`, `keras/src/...`).
    pub fn of_file(file: &str) -> Option<Framework> {
        let package = file.split('/').next()?;
        match package {
            "torch" | "torchvision" | "torchaudio" | "lightning" | "pytorch_lightning" => {
                Some(Framework::Pytorch)
            }
            "tensorflow" | "keras" | "tf_keras" | "tensorflow_datasets" => {
                Some(Framework::Tensorflow)
            }
            "jax" | "jaxlib" | "flax" | "optax" | "orbax" => Some(Framework::Jax),
            _ => None,
        }
    }
}

/// The framework of a burst's reads: the one most of the installed frames
/// belong to (none on a tie or without any).
pub fn of_reads(reads: &[Vec<ThreadRead>]) -> Option<Framework> {
    let mut counts = [0u32; 3];
    let frames = reads.iter().flatten().flat_map(|t| t.frames.iter());
    for f in frames.filter(|f| f.library) {
        if let Some(fw) = Framework::of_file(&f.file) {
            counts[fw as usize] += 1;
        }
    }
    let best = *counts.iter().max()?;
    let mut top = Framework::ALL
        .into_iter()
        .filter(|f| counts[*f as usize] == best);
    match (top.next(), top.next()) {
        (Some(f), None) if best > 0 => Some(f),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::evidence::framework as evidence;
    use crate::types::frame::{HostFrame, JobFrame, JobFramework};
    use crate::types::reads::CodeFrame;

    fn job(loaded: &[Framework], workers: u32, pin: bool) -> JobFrame {
        JobFrame {
            framework: JobFramework {
                loaded: loaded.to_vec(),
                data_loader_workers: workers,
                pin_memory_thread: pin,
            },
            ..JobFrame::default()
        }
    }

    #[test]
    fn one_framework_loaded_names_it() {
        let host = HostFrame {
            cpus: Some(8),
            cpu_utilization: Some(0.25),
            ..HostFrame::default()
        };
        let j = job(&[Framework::Tensorflow], 0, false);
        let e = evidence(&[&j], &host).unwrap();
        assert_eq!(e.name, Some(Framework::Tensorflow));
        assert_eq!((e.data_loader_workers, e.pin_memory), (None, None));
        assert_eq!(e.idle_cpus, Some(6.0));
    }

    #[test]
    fn two_loaded_are_settled_by_the_data_loaders_names_only() {
        let both = [Framework::Pytorch, Framework::Tensorflow];
        let host = HostFrame::default();
        let unsettled = job(&both, 0, false);
        let e = evidence(&[&unsettled], &host).unwrap();
        assert_eq!(e.name, None);
        assert_eq!(e.data_loader_workers, Some(0));
        let workers = job(&both, 3, true);
        let e = evidence(&[&workers], &host).unwrap();
        assert_eq!(e.name, Some(Framework::Pytorch));
        assert_eq!((e.data_loader_workers, e.pin_memory), (Some(3), Some(true)));
        assert!(evidence(&[&job(&[], 0, false)], &host).is_none());
    }

    fn read(files: &[&str]) -> Vec<ThreadRead> {
        vec![ThreadRead {
            pid: 1,
            tid: 1,
            name: "python3".into(),
            state: 'R',
            owns_gil: true,
            frames: files
                .iter()
                .map(|f| CodeFrame {
                    function: "f".into(),
                    file: (*f).into(),
                    line: 1,
                    library: !f.starts_with("train"),
                })
                .collect(),
        }]
    }

    #[test]
    fn stacks_name_the_framework_most_of_their_installed_frames_are_in() {
        let torch = read(&[
            "PIL/Image.py",
            "torch/utils/data/_utils/fetch.py",
            "torch/utils/data/dataloader.py",
            "train.py",
        ]);
        assert_eq!(of_reads(&[torch]), Some(Framework::Pytorch));
        let tf = read(&[
            "tensorflow/python/data/ops/iterator_ops.py",
            "keras/src/trainer.py",
        ]);
        assert_eq!(of_reads(&[tf]), Some(Framework::Tensorflow));
        assert_eq!(of_reads(&[read(&["PIL/Image.py", "train.py"])]), None);
        let tie = read(&["torch/nn/module.py", "jax/_src/api.py"]);
        assert_eq!(of_reads(&[tie]), None);
    }
}
