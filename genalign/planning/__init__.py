"""Memory planning: how much memory per GPU a training config needs, by component, and whether it fits.

``genalign plan CONFIG --gpus N --gpu-memory GB`` (:mod:`.command`) prints the plan. How the figures are made:

1. Every model is built from its config on the ``meta`` device (:mod:`.meta_models`; configs from the model's folder,
   or :mod:`.architectures` for the presets' hub ids), with LoRA, frozen parts and gradient checkpointing set by the
   policy's own functions, so parameter counts are exact.
2. Weights, gradients and optimizer state follow from those parameters, their dtypes and the sharding of
   ``run.distributed`` / ``run.fsdp`` (:mod:`.sharding`, :mod:`.optimizer_state`).
3. Activations and the other transients (one update micro-batch, the reference pass, the sampler's forwards) are
   measured by running the policy's own scoring and sampling code on meta tensors and counting the bytes alive at the
   peak (:mod:`.tracing`), through shallow copies of deep models (:mod:`.depth`).
4. Each family says what its process holds (:mod:`.workload`: :mod:`.lm_workloads`, :mod:`.dlm_workload`,
   :mod:`.flow_workload`); :mod:`.estimate` adds it up per phase (rollout, update), :mod:`.report` prints it and
   :mod:`.suggestions` plans the changes that would make it fit.

benchmarks/bench_plan.py checks the estimate against the measured peak of CPU training runs.
"""

from genalign.planning.estimate import GPU_OVERHEADS, NO_OVERHEADS, Component, MemoryPlan, Overheads, plan_memory
from genalign.planning.report import format_plan

__all__ = ["GPU_OVERHEADS", "NO_OVERHEADS", "Component", "MemoryPlan", "Overheads", "format_plan", "plan_memory"]
