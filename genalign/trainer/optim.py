"""The optimizer (AdamW, fused AdamW, Adafactor, SGD, 8-bit AdamW) with a warm-up + constant / linear / cosine
learning-rate schedule and per-name learning-rate factors."""

from __future__ import annotations

import math
from fnmatch import fnmatchcase

import torch
from torch import nn

from genalign.config.schema import OptimConfig


def lr_multiplier(step: int, *, warmup_steps: int, total_steps: int, schedule: str) -> float:
    """Multiplier of the base LR after ``step`` optimizer steps (warm-up linear from 0, then the schedule)."""
    if warmup_steps and step < warmup_steps:
        return (step + 1) / warmup_steps
    if schedule == "constant":
        return 1.0
    progress = min(1.0, (step - warmup_steps) / max(1, total_steps - warmup_steps))
    if schedule == "linear":
        return 1.0 - progress
    return 0.5 * (1.0 + math.cos(math.pi * progress))  # cosine


def named_trainable_parameters(policy) -> list[tuple[str, nn.Parameter]]:
    """``policy.trainable_parameters()`` with the names they have in ``policy.modules_to_train()`` (``param<i>`` for
    a parameter outside those modules), in the order of ``trainable_parameters``."""
    names: dict[int, str] = {}
    for module in policy.modules_to_train():
        for name, param in module.named_parameters():
            names.setdefault(id(param), name)
    return [(names.get(id(p), f"param{i}"), p) for i, p in enumerate(policy.trainable_parameters())]


def parameter_groups(named: list[tuple[str, nn.Parameter]], lr: float, lr_scale: dict[str, float]) -> list[dict]:
    """AdamW parameter groups: one per ``lr_scale`` pattern (first matching glob wins) plus one at factor 1.

    Raises:
        ValueError: a pattern matches no trainable parameter (a typo would otherwise silently train at factor 1).
    """
    groups: dict[str | None, list[nn.Parameter]] = {pattern: [] for pattern in lr_scale}
    groups[None] = []
    for name, param in named:
        pattern = next((p for p in lr_scale if fnmatchcase(name, p)), None)
        groups[pattern].append(param)
    unused = [pattern for pattern in lr_scale if not groups[pattern]]
    if unused:
        examples = ", ".join(name for name, _ in named[:3])
        raise ValueError(
            f"optim.lr_scale pattern(s) {unused} match no trainable parameter; names look like: {examples}, ..."
        )
    return [
        {"params": params, "lr": lr * (1.0 if pattern is None else lr_scale[pattern]), "name": pattern or "default"}
        for pattern, params in groups.items()
        if params
    ]


def build_optimizer(
    named_parameters: list[tuple[str, nn.Parameter]], cfg: OptimConfig, *, total_steps: int
) -> tuple[torch.optim.Optimizer, torch.optim.lr_scheduler.LambdaLR]:
    """The configured optimizer over ``named_parameters`` (see :func:`named_trainable_parameters`) with
    ``cfg.lr_scale`` groups; the schedule multiplies every group's own learning rate."""
    if not named_parameters:
        raise ValueError("the policy has no trainable parameters; check policy.lora / freezing options.")
    groups = parameter_groups(named_parameters, cfg.lr, cfg.lr_scale)
    optimizer = make_optimizer(cfg, groups)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer,
        lambda s: lr_multiplier(s, warmup_steps=cfg.warmup_steps, total_steps=total_steps, schedule=cfg.schedule),
    )
    return optimizer, scheduler


def make_optimizer(cfg: OptimConfig, groups: list[dict]) -> torch.optim.Optimizer:
    """``cfg.optimizer`` over parameter ``groups``."""
    betas = tuple(cfg.betas)
    if cfg.optimizer in ("adamw", "adamw_fused"):
        fused = {"fused": True} if cfg.optimizer == "adamw_fused" else {}
        return torch.optim.AdamW(groups, lr=cfg.lr, betas=betas, eps=cfg.eps, weight_decay=cfg.weight_decay, **fused)
    if cfg.optimizer == "adafactor":
        return torch.optim.Adafactor(groups, lr=cfg.lr, weight_decay=cfg.weight_decay)
    if cfg.optimizer == "sgd":
        return torch.optim.SGD(groups, lr=cfg.lr, momentum=cfg.momentum, weight_decay=cfg.weight_decay)
    import bitsandbytes  # adamw_8bit; the config checked that it is installed

    return bitsandbytes.optim.AdamW8bit(groups, lr=cfg.lr, betas=betas, eps=cfg.eps, weight_decay=cfg.weight_decay)
