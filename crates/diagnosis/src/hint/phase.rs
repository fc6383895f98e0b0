//! The hint of a job's own phase that lasted too long or took too large a
//! share of the last hour: what it cost and its fix.

use crate::types::phase::{JobPhase, PhaseStatus};

impl JobPhase {
    fn words(self) -> &'static str {
        match self {
            JobPhase::Compiling => "compiling",
            JobPhase::Checkpointing => "saving or loading a checkpoint",
            JobPhase::DataLoaderStartup => "starting its DataLoader's workers",
        }
    }
}

/// What to say of an unusual phase, before the stall kind's own hint.
pub fn hint(p: &PhaseStatus) -> String {
    let share = format!(
        "{:.0}% of the GPU's last hour ({} time{})",
        p.share_last_hour * 100.0,
        p.entered_last_hour,
        if p.entered_last_hour == 1 { "" } else { "s" }
    );
    let fix = match p.phase {
        JobPhase::Compiling => {
            "A model whose input shapes change recompiles at every new shape: mark the changing \
             dimensions dynamic (torch.compile(dynamic=True), torch._dynamo.mark_dynamic), pad or \
             bucket inputs to a few shapes; TORCH_LOGS=recompiles says why each recompilation \
             happened (for tf.function: input_signature with None dimensions; for jax.jit: fewer \
             static arguments)."
        }
        JobPhase::Checkpointing => {
            "Save less often, or asynchronously (torch.distributed.checkpoint.async_save, Orbax's \
             async checkpointer), to fast local storage, and only what a restart needs."
        }
        JobPhase::DataLoaderStartup => {
            "persistent_workers=True keeps the DataLoader's workers between epochs; a lighter \
             Dataset object (it is copied into each worker) and fewer workers start faster."
        }
    };
    format!(
        "The job has been {} for {:.0} s, {share}. {fix}",
        p.phase.words(),
        p.seconds
    )
}
