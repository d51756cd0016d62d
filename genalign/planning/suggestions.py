"""What to change when a plan does not fit: each candidate change planned again, with the figure it gives.

Candidates, tried one at a time on top of the user's own overrides (so every line is a command that works):
more GPUs (doubling, up to 8x), ``fsdp`` instead of ``ddp``, CPU offload of the shards, LoRA instead of full
fine-tuning, gradient checkpointing, a smaller update micro-batch, a smaller sampling batch.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from genalign.planning.estimate import GB, MemoryPlan


@dataclass(frozen=True)
class Suggestion:
    """A change (``overrides`` and/or GPU count) and the plan it gives, in one line of ``text``."""

    overrides: tuple[str, ...]
    gpus: int
    peak_gb: float
    fits: bool
    text: str


def _candidates(config, gpus: int) -> list[tuple[tuple[str, ...], int]]:
    from genalign.policies import family_traits

    run, policy = config.run, config.policy
    traits = family_traits(policy)  # the LoRA rank its presets use, its checkpointing knob, its sampling batch
    found: list[tuple[tuple[str, ...], int]] = []
    strategy = run.distributed if run.distributed != "auto" else ("none" if gpus == 1 else "ddp")
    sharded = ("run.distributed=fsdp",) if strategy != "fsdp" else ()
    for factor in (2, 4, 8):
        found.append((sharded, gpus * factor))
    if strategy != "fsdp" and gpus > 1:
        found.append((sharded, gpus))
    if not run.fsdp.cpu_offload:
        found.append(((*sharded, "run.fsdp.cpu_offload=true"), gpus))
    if policy.lora.rank == 0:
        found.append(((f"policy.lora.rank={traits.suggested_lora_rank}",), gpus))
    if traits.suggest_checkpointing and not policy.gradient_checkpointing:
        found.append((("policy.gradient_checkpointing=true",), gpus))
    micro = config.algorithm.micro_batch_size
    if micro > 1:
        found.append(((f"algorithm.micro_batch_size={max(1, micro // 2)}",), gpus))
    batch_field = traits.sample_batch_field
    if batch_field and getattr(policy, batch_field) > 1:
        found.append(((f"policy.{batch_field}={getattr(policy, batch_field) // 2}",), gpus))
    return found


def suggest(
    config, gpus: int, plan_for: Callable[[tuple[str, ...], int], MemoryPlan], *, keep: int = 6
) -> list[Suggestion]:
    """Candidate changes of ``config`` (module docstring), each planned with ``plan_for(extra overrides, gpus)``;
    the ones that help, those that fit first, then by peak. More-GPU candidates stop at the first that fits."""
    found: list[Suggestion] = []
    gpus_fit = False
    for overrides, count in _candidates(config, gpus):
        if count != gpus and gpus_fit:
            continue
        try:
            plan = plan_for(overrides, count)
        except ValueError as err:  # a combination the trainer refuses (e.g. shard_size not dividing the GPUs)
            found.append(Suggestion(overrides, count, float("inf"), False, f"{' '.join(overrides)}: {err}"))
            continue
        gpus_fit = gpus_fit or (count != gpus and plan.fits)
        change = " ".join(overrides) + (f" --gpus {count}" if count != gpus else "")
        word = "fits" if plan.fits else "still does not fit"
        found.append(Suggestion(overrides, count, plan.peak / GB, plan.fits,
                                f"{change.strip()}: {plan.peak / GB:.1f} GB per GPU ({word})"))  # fmt: skip
    found.sort(key=lambda s: (not s.fits, s.peak_gb))
    return found[:keep]


__all__ = ["Suggestion", "suggest"]
