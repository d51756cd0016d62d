"""The GPU check (issue 14, item 6): five measurements a machine with one GPU runs in a few minutes, written to
``benchmarks/gpu_results.md`` by ``scripts/gpu_check.sh`` (``python -m benchmarks.gpu_check``).

a. bf16 re-scoring vs rollout log-prob mismatch (:mod:`~benchmarks.gpu_check.logprob_mismatch`);
b. vLLM rollout -> weight update -> rollout shows the new weights (:mod:`~benchmarks.gpu_check.vllm_weights`);
c. FSDP2 in one process through ``torchrun`` (:mod:`~benchmarks.gpu_check.fsdp_one_process`);
d. LM tokens/s against TRL's ``GRPOTrainer`` on a ~0.5B model (:mod:`~benchmarks.gpu_check.lm_vs_trl`);
e. a flow iteration against a plain diffusers sampling loop (:mod:`~benchmarks.gpu_check.flow_vs_diffusers`).

Each part is a function ``part(device, *, smoke, workdir) -> PartResult``; ``smoke=True`` runs tiny sizes through the
same code on the CPU (tests/benchmarks/test_gpu_check.py). Every model is built from a config: no network needed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from benchmarks.gpu_check import flow_vs_diffusers, fsdp_one_process, lm_vs_trl, logprob_mismatch, vllm_weights
from benchmarks.gpu_check.common import PartResult


@dataclass(frozen=True)
class PartSpec:
    """A part: its function ``(device, *, smoke, workdir) -> PartResult``, title and wall-clock limit on one GPU."""

    function: Callable[..., PartResult]
    title: str
    limit_s: int


#: part letter -> spec, run in this order (the slowest last)
PARTS: dict[str, PartSpec] = {
    "a": PartSpec(logprob_mismatch.logprob_mismatch, logprob_mismatch.TITLE, 120),
    "b": PartSpec(vllm_weights.vllm_weight_update, vllm_weights.TITLE, 120),
    "c": PartSpec(fsdp_one_process.fsdp_one_process, fsdp_one_process.TITLE, 150),
    "e": PartSpec(flow_vs_diffusers.flow_vs_diffusers, flow_vs_diffusers.TITLE, 120),
    "d": PartSpec(lm_vs_trl.lm_vs_trl, lm_vs_trl.TITLE, 200),
}

__all__ = ["PARTS", "PartResult", "PartSpec"]
