"""The plan as text: a table by component, the phase totals, the verdict, the assumptions and the suggestions."""

from __future__ import annotations

from genalign.planning.estimate import GB, MemoryPlan
from genalign.planning.suggestions import Suggestion

_PHASE_LABEL = {"resident": "always", "rollout": "rollout", "teacher": "teacher", "update": "update"}


def verdict(plan: MemoryPlan) -> str:
    """``FITS`` / ``DOES NOT FIT`` with the peak against the GPU's memory."""
    word = "FITS" if plan.fits else "DOES NOT FIT"
    share = plan.peak / (plan.gpu_memory_gb * GB)
    return f"{word}: {plan.peak / GB:.1f} GB of {plan.gpu_memory_gb:g} GB per GPU ({share:.0%})"


def layout_text(plan: MemoryPlan) -> str:
    layout = plan.layout
    if layout.strategy == "fsdp":
        hybrid = f", replicated x{plan.gpus // layout.group}" if layout.group < plan.gpus else ""
        offload = ", CPU offload" if layout.cpu_offload else ""
        return f"fsdp (sharded over {layout.group} GPUs{hybrid}{offload})"
    return layout.strategy


def format_plan(plan: MemoryPlan, suggestions: list[Suggestion] | None = None) -> str:
    """The plan as a fixed-width table followed by its totals, assumptions, problems and suggestions."""
    lines = [
        f"genalign plan {plan.config_name}: {plan.gpus} GPU(s) x {plan.gpu_memory_gb:g} GB, "
        f"run.distributed = {layout_text(plan)}",
        f"policy: {plan.parameters.total / 1e9:.3f}B parameters, {plan.parameters.trainable / 1e6:,.1f}M trainable",
        "",
        f"{'component':<34} {'phase':<8} {'GB/GPU':>8}  what",
        f"{'-' * 34} {'-' * 8} {'-' * 8}  {'-' * 40}",
    ]
    for c in plan.components:
        lines.append(f"{c.name:<34} {_PHASE_LABEL[c.phase]:<8} {c.bytes / GB:>8.2f}  {c.detail}")
    resident = sum(c.bytes for c in plan.components if c.phase == "resident")
    lines += [
        "",
        f"{'always resident':<43} {resident / GB:>8.2f}",
        f"{'rollout peak (always + rollout)':<43} {plan.total('rollout') / GB:>8.2f}",
        *(
            [f"{'teacher peak (always + teacher)':<43} {plan.total('teacher') / GB:>8.2f}"]
            if any(c.phase == "teacher" for c in plan.components)
            else []
        ),
        f"{'update peak (always + update)':<43} {plan.total('update') / GB:>8.2f}",
        f"{'peak on the device':<43} {plan.peak / GB:>8.2f}  = max x{plan.overheads.fragmentation:g} + "
        f"{plan.overheads.context_bytes / GB:g} GB",
        "",
        verdict(plan),
    ]
    lines += [f"  problem: {p}" for p in plan.problems]
    lines += ["", "assumptions:"] + [f"  - {a}" for a in plan.assumptions]
    if suggestions:
        lines += ["", "to make it fit (each change alone, planned again):"]
        lines += [f"  - {s.text}" for s in suggestions]
    return "\n".join(lines)


__all__ = ["format_plan", "layout_text", "verdict"]
