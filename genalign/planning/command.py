"""``genalign plan`` and the hardware check of ``genalign validate`` (the CLI's side of the planner)."""

from __future__ import annotations

from genalign.planning.estimate import MemoryPlan, plan_memory
from genalign.planning.report import format_plan, verdict
from genalign.planning.suggestions import suggest


def hardware_of(config, gpus: int | None, gpu_memory_gb: float | None) -> tuple[int, float]:
    """``--gpus`` / ``--gpu-memory``, else the config's ``hardware`` section.

    Raises:
        ValueError: neither gives a value, naming the option and the field.
    """
    gpus = gpus if gpus is not None else config.hardware.gpus
    memory = gpu_memory_gb if gpu_memory_gb is not None else config.hardware.gpu_memory_gb
    if gpus is None or memory is None:
        missing = "--gpus (hardware.gpus)" if gpus is None else "--gpu-memory (hardware.gpu_memory_gb)"
        raise ValueError(f"{missing} is not given and the config does not state it; pass it, e.g. --gpus 8 "
                         "--gpu-memory 80, or add a hardware: section to the config.")  # fmt: skip
    return gpus, memory


def run_plan(path: str, overrides: list[str], gpus: int | None, gpu_memory_gb: float | None) -> tuple[str, bool]:
    """The text of ``genalign plan`` and whether the config fits (suggestions are planned when it does not)."""
    from genalign.config import load_config

    config = load_config(path, overrides)
    count, memory = hardware_of(config, gpus, gpu_memory_gb)
    plan = plan_memory(config, gpus=count, gpu_memory_gb=memory, config_name=path)
    suggestions = None
    if not plan.fits:

        def plan_for(extra: tuple[str, ...], gpus_: int) -> MemoryPlan:
            return plan_memory(load_config(path, [*overrides, *extra]), gpus=gpus_, gpu_memory_gb=memory)

        suggestions = suggest(config, count, plan_for)
    return format_plan(plan, suggestions), plan.fits


def hardware_warning(config, name: str) -> str | None:
    """A warning when ``config`` names hardware (``hardware.gpus`` and ``hardware.gpu_memory_gb``) that its plan does
    not fit, or that it cannot be planned; None when it fits or names no hardware."""
    hardware = config.hardware
    if hardware.gpus is None or hardware.gpu_memory_gb is None:
        return None
    try:
        plan = plan_memory(config, gpus=hardware.gpus, gpu_memory_gb=hardware.gpu_memory_gb, config_name=name)
    except (ValueError, FileNotFoundError) as err:
        return f"WARNING: {name}: the memory plan for its hardware section could not be made: {err}"
    if plan.fits:
        return None
    return (
        f"WARNING: {name} names hardware.gpus = {hardware.gpus} x hardware.gpu_memory_gb = "
        f"{hardware.gpu_memory_gb:g}, but genalign plan says it {verdict(plan)}; run `genalign plan {name}` for "
        "the components and what to change."
    )


__all__ = ["hardware_of", "hardware_warning", "run_plan"]
