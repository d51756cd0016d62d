"""AdamW with a warm-up + constant / linear / cosine learning-rate schedule."""

from __future__ import annotations

import math

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


def build_optimizer(
    parameters: list[nn.Parameter], cfg: OptimConfig, *, total_steps: int
) -> tuple[torch.optim.AdamW, torch.optim.lr_scheduler.LambdaLR]:
    if not parameters:
        raise ValueError("the policy has no trainable parameters; check policy.lora / freezing options.")
    optimizer = torch.optim.AdamW(
        parameters, lr=cfg.lr, betas=tuple(cfg.betas), eps=cfg.eps, weight_decay=cfg.weight_decay
    )
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer,
        lambda s: lr_multiplier(s, warmup_steps=cfg.warmup_steps, total_steps=total_steps, schedule=cfg.schedule),
    )
    return optimizer, scheduler
