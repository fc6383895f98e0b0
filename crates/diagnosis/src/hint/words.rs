//! The fixes that depend on the job's framework, in its own words: a
//! PyTorch job hears of `num_workers`, a TensorFlow job of `tf.data`, a JAX
//! job of its loaders and `jax.jit`, and a job whose framework is not known
//! plain words that name none.

use crate::types::evidence::Evidence;
use crate::types::framework::Framework;

/// The name PyTorch gives a DataLoader's worker processes.
const DATA_LOADER_WORKER: &str = "pt_data_worker";

/// What the hints need to know of the job.
pub struct Job {
    pub framework: Option<Framework>,
    /// PyTorch DataLoader worker processes, where known.
    pub workers: Option<u32>,
    pub pin_memory: Option<bool>,
    pub idle_cpus: Option<f64>,
}

impl Job {
    pub fn of(evidence: &Evidence) -> Job {
        let f = evidence.framework.as_ref();
        Job {
            framework: chosen(evidence),
            workers: f.and_then(|f| f.data_loader_workers),
            pin_memory: f.and_then(|f| f.pin_memory),
            idle_cpus: f.and_then(|f| f.idle_cpus),
        }
    }

    /// ` (the host has about 5 idle CPUs)`: how far workers can grow.
    fn room(&self) -> String {
        match self.idle_cpus {
            Some(n) if n >= 1.0 => format!(" (the host has about {n:.0} idle CPUs)"),
            Some(_) => {
                " (the host has less than one idle CPU: more workers need cores of their own)"
                    .into()
            }
            None => String::new(),
        }
    }

    fn pin(&self) -> &'static str {
        if self.pin_memory == Some(false) {
            ", pin_memory=True (batches copied to the GPU from page-locked memory)"
        } else {
            ""
        }
    }
}

/// How to feed the GPU faster (input_starved, input_bound).
pub fn feed(job: &Job) -> String {
    match job.framework {
        Some(Framework::Pytorch) => match job.workers {
            Some(n) if n > 0 => format!(
                "The DataLoader's {n} worker process{} cannot keep up: raise num_workers{}, \
                 prefetch_factor (batches each worker prepares ahead), persistent_workers=True \
                 (workers kept between epochs){}, and make the Dataset's __getitem__ cheaper \
                 (decode and resize once, ahead of training, not at every step).",
                if n == 1 { "" } else { "es" },
                job.room(),
                job.pin()
            ),
            _ => format!(
                "The DataLoader loads every batch in the training process itself \
                 (num_workers=0): load in worker processes, DataLoader(num_workers=N){}, with \
                 persistent_workers=True and pin_memory=True, and make the Dataset's \
                 __getitem__ cheaper (decode and resize once, ahead of training).",
                job.room()
            ),
        },
        Some(Framework::Tensorflow) => "Overlap loading with compute: \
            dataset.prefetch(tf.data.AUTOTUNE), not 1; run per-sample work in parallel: \
            map(..., num_parallel_calls=tf.data.AUTOTUNE), and map before batch; cache() decoded \
            data only if it fits in memory (else cache(\"/path\"))."
            .to_owned(),
        Some(Framework::Jax) => "JAX trains from a host-side loader: decode and augment in \
            parallel (Grain's worker_count, tf.data's num_parallel_calls), and put the next \
            batches on the device while the step runs (prefetch to device from a background \
            thread)."
            .to_owned(),
        None => format!(
            "Overlap loading with compute (prefetch: prepare the next batches while the GPU works), \
             decode and augment in parallel worker processes{}, do per-sample work before \
             batching, and store the data preprocessed.",
            job.room()
        ),
    }
}

/// How to take Python work off one pinned thread (single_thread_bound),
/// given the thread's name.
pub fn unpin(job: &Job, thread: Option<&str>) -> String {
    match job.framework {
        Some(Framework::Pytorch) if thread == Some(DATA_LOADER_WORKER) => format!(
            "It is {}, and a worker prepares whole batches alone: raise num_workers{}, and make \
             __getitem__ cheaper (vectorize it with numpy or torch ops; decode once, ahead of \
             training).",
            match job.workers {
                Some(n) if n > 1 => format!("one of the DataLoader's {n} worker processes"),
                _ => "the DataLoader's only worker process".to_owned(),
            },
            job.room()
        ),
        Some(Framework::Pytorch) if job.workers.unwrap_or(0) == 0 => format!(
            "The DataLoader runs __getitem__ in this process (num_workers=0): move it to worker \
             processes, DataLoader(num_workers=N){}, and vectorize it (numpy or torch ops \
             instead of per-pixel Python, PIL, cv2 in a loop).",
            job.room()
        ),
        Some(Framework::Pytorch) => "Blocking or non-vectorized Python in the training loop \
            holds the GIL while the DataLoader's workers wait: move per-sample work into the \
            Dataset (its workers run it in parallel) and vectorize the rest."
            .to_owned(),
        Some(Framework::Tensorflow) => "Blocking or non-vectorized Python in the map function \
            (PIL, cv2.imread, time.sleep, py_function) holds the GIL: vectorize it with tf ops, \
            or run it in parallel (map(..., num_parallel_calls=tf.data.AUTOTUNE))."
            .to_owned(),
        _ => "Blocking or non-vectorized Python on this thread (PIL, cv2.imread, time.sleep, a \
            per-pixel loop) holds the GIL: vectorize it (numpy), or move it to parallel worker \
            processes."
            .to_owned(),
    }
}

/// Where GIL-bound work spread over threads should go instead.
pub fn off_the_gil(job: &Job) -> &'static str {
    match job.framework {
        Some(Framework::Pytorch) => {
            "Move the Python work into the Dataset's __getitem__ and run it in DataLoader worker \
             processes (num_workers), not in more threads, or vectorize it with numpy / torch ops."
        }
        Some(Framework::Tensorflow) => {
            "tf.data runs py_function on its pool threads: vectorize the map function with tf ops \
             / numpy, or move the Python work (PIL, cv2, py_function) to worker processes, not \
             more threads."
        }
        _ => {
            "Vectorize the work (numpy), or move it (PIL, cv2) to worker processes \
             (multiprocessing), not more threads."
        }
    }
}

/// How to read faster (io_bound).
pub fn read_faster(job: &Job) -> String {
    let shards = "larger sequential files instead of many small ones";
    match job.framework {
        Some(Framework::Pytorch) => format!(
            "Read from faster or local storage, overlap reads with more DataLoader workers \
             (num_workers{}; readers blocked on storage use no CPU), and use {shards} \
             (WebDataset shards, a few large files).",
            job.room()
        ),
        Some(Framework::Tensorflow) => format!(
            "Read from faster or local storage, use parallel reads \
             (interleave(num_parallel_calls=...)), {shards} (TFRecord), or cache() the dataset \
             on local disk."
        ),
        _ => format!(
            "Read from faster or local storage, read in parallel (more loader workers or \
             threads), use {shards}, or cache the dataset on local disk."
        ),
    }
}

/// How to need less host memory (host_memory_pressure).
pub fn less_host_memory(job: &Job) -> &'static str {
    match job.framework {
        Some(Framework::Pytorch) => {
            "Every DataLoader worker holds its own copy of what the Dataset holds (Python lists \
             and dicts are copied as they are read: keep samples in numpy arrays or on disk); use \
             fewer workers or a smaller prefetch_factor, and cache on disk, not in memory."
        }
        Some(Framework::Tensorflow) => {
            "cache() of a dataset larger than RAM fills memory: cache to disk with \
             cache(\"/path\") or only cache what fits; reduce prefetch and shuffle buffers."
        }
        _ => {
            "An in-memory cache of a dataset larger than RAM fills memory: cache to disk or only \
             what fits; reduce prefetch and shuffle buffers and the number of loader workers."
        }
    }
}

/// What fills GPU memory and how to need less (gpu_memory_full).
pub fn less_gpu_memory(job: &Job) -> &'static str {
    match job.framework {
        Some(Framework::Pytorch) => {
            "PyTorch's caching allocator keeps freed blocks for reuse (compare \
             torch.cuda.memory_allocated with memory_reserved); if it is real use, reduce the \
             batch size or use activation checkpointing or mixed precision; \
             PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True reduces fragmentation."
        }
        Some(Framework::Tensorflow) => {
            "TensorFlow preallocates almost all of it by default (set \
             TF_FORCE_GPU_ALLOW_GROWTH=true or tf.config.experimental.set_memory_growth); if \
             this is real use, reduce the batch size or use gradient accumulation."
        }
        Some(Framework::Jax) => {
            "JAX preallocates 75% of it at start (XLA_PYTHON_CLIENT_PREALLOCATE=false, or \
             XLA_PYTHON_CLIENT_MEM_FRACTION); if this is real use, reduce the batch size or \
             rematerialize (jax.checkpoint)."
        }
        None => {
            "Some frameworks reserve most of it at start; if this is real use, reduce the batch \
             size, use gradient accumulation, activation checkpointing or mixed precision."
        }
    }
}

/// How to fill the GPU with fewer, larger kernels (launch_bound).
pub fn fewer_launches(job: &Job) -> &'static str {
    match job.framework {
        Some(Framework::Pytorch) => {
            "Use a larger batch, CUDA graphs (torch.cuda.graphs, \
             torch.compile(mode=\"reduce-overhead\")), torch.compile to fuse small ops, and fewer \
             host syncs (.item(), .cpu(), printing tensors each step)."
        }
        Some(Framework::Tensorflow) => {
            "Use a larger batch, compile the step with XLA (tf.function(jit_compile=True)), run \
             several steps per call (Keras steps_per_execution), and fewer host syncs (.numpy() \
             each step)."
        }
        Some(Framework::Jax) => {
            "Use a larger batch, jax.jit the whole training step (not its pieces), and fewer \
             host syncs (block_until_ready, printing arrays each step)."
        }
        None => {
            "Use a larger batch, fuse small operations (a compiler, CUDA graphs), and fewer host \
             syncs (reading values back to the CPU each step)."
        }
    }
}

/// The framework a finding's hint speaks: its stacks' where they name one,
/// else the one its frames settled.
pub fn chosen(evidence: &Evidence) -> Option<Framework> {
    evidence
        .stacks
        .as_ref()
        .and_then(|s| s.framework)
        .or_else(|| evidence.framework.as_ref().and_then(|f| f.name))
}

#[cfg(test)]
mod tests {
    use crate::Kind;
    use crate::detect::hint;
    use crate::types::evidence::{Evidence, ThreadEvidence};
    use crate::types::framework::{Framework, FrameworkEvidence};
    use crate::types::stack_report::{ReadOutcome, StackReport};

    fn frames_say(name: Option<Framework>, workers: u32, idle_cpus: f64) -> Evidence {
        Evidence {
            framework: Some(FrameworkEvidence {
                name,
                libraries: name.into_iter().collect(),
                data_loader_workers: (name == Some(Framework::Pytorch)).then_some(workers),
                pin_memory: (name == Some(Framework::Pytorch)).then_some(false),
                idle_cpus: Some(idle_cpus),
            }),
            ..Evidence::default()
        }
    }

    const INPUT: [Kind; 5] = [
        Kind::InputStarved,
        Kind::InputBound,
        Kind::SingleThreadBound,
        Kind::IoBound,
        Kind::HostMemoryPressure,
    ];

    #[test]
    fn a_pytorch_job_hears_of_its_data_loader_never_of_tf_data() {
        for kind in INPUT {
            let h = hint(kind, &frames_say(Some(Framework::Pytorch), 0, 5.2));
            assert!(!h.contains("tf.") && !h.contains("cache("), "{kind:?}: {h}");
            assert!(
                h.contains("DataLoader") || h.contains("worker"),
                "{kind:?}: {h}"
            );
        }
        let inline = hint(
            Kind::InputBound,
            &frames_say(Some(Framework::Pytorch), 0, 5.2),
        );
        assert!(
            inline.contains("num_workers=0") && inline.contains("about 5 idle CPUs"),
            "{inline}"
        );
        let one = hint(
            Kind::InputBound,
            &frames_say(Some(Framework::Pytorch), 1, 0.4),
        );
        assert!(one.contains("1 worker process cannot keep up"), "{one}");
        assert!(
            one.contains("less than one idle CPU") && one.contains("pin_memory=True"),
            "{one}"
        );
    }

    #[test]
    fn a_pinned_data_loader_worker_is_named_as_one() {
        let mut e = frames_say(Some(Framework::Pytorch), 2, 3.0);
        e.top_threads = vec![ThreadEvidence {
            pid: 7,
            tid: 7,
            name: "pt_data_worker".into(),
            state: "R".into(),
            cpu_ratio: 0.97,
            wait_ratio: None,
        }];
        let h = hint(Kind::SingleThreadBound, &e);
        assert!(
            h.contains("one of the DataLoader's 2 worker processes")
                && h.contains("raise num_workers"),
            "{h}"
        );
    }

    #[test]
    fn a_tensorflow_job_hears_of_tf_data_never_of_num_workers() {
        for kind in INPUT {
            let h = hint(kind, &frames_say(Some(Framework::Tensorflow), 0, 2.0));
            assert!(
                !h.contains("num_workers") && !h.contains("DataLoader"),
                "{kind:?}: {h}"
            );
        }
        let h = hint(
            Kind::InputStarved,
            &frames_say(Some(Framework::Tensorflow), 0, 2.0),
        );
        assert!(h.contains("tf.data.AUTOTUNE"), "{h}");
    }

    #[test]
    fn an_unknown_job_hears_plain_words() {
        for kind in INPUT
            .into_iter()
            .chain([Kind::GpuMemoryFull, Kind::LaunchBound])
        {
            let h = hint(kind, &frames_say(None, 0, 2.0));
            for word in ["tf.data", "num_workers", "DataLoader", "torch", "TF_FORCE"] {
                assert!(!h.contains(word), "{kind:?} names {word}: {h}");
            }
        }
    }

    #[test]
    fn the_stacks_framework_wins_over_two_loaded_libraries() {
        let mut e = frames_say(None, 0, 2.0);
        e.framework.as_mut().unwrap().libraries = vec![Framework::Pytorch, Framework::Tensorflow];
        let mut stacks =
            crate::stack_report::unavailable(7, ReadOutcome::Sampled, String::new(), 0.0);
        stacks.framework = Some(Framework::Tensorflow);
        e.stacks = Some(StackReport { ..stacks });
        let h = hint(Kind::InputBound, &e);
        assert!(h.contains("tf.data") && !h.contains("num_workers"), "{h}");
    }
}
