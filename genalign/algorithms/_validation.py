"""Input checks shared by the algorithm functions.

Every public function in ``genalign.algorithms`` validates its tensors here, so that a wrong shape raises a
``ValueError`` naming the argument and the expected shape instead of being broadcast silently.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor


def check_float_tensor(value: Any, name: str, shape_hint: str) -> Tensor:
    """Check that ``value`` is a floating-point tensor (any shape) and return it."""
    if not isinstance(value, Tensor):
        raise ValueError(f"{name} must be a torch.Tensor of shape {shape_hint}, got {type(value).__name__}")
    if not value.is_floating_point():
        raise ValueError(f"{name} must be a floating-point tensor of shape {shape_hint}, got dtype {value.dtype}")
    return value


def check_rewards(rewards: Any, name: str = "rewards") -> Tensor:
    """``rewards`` must be floating ``[N]`` or ``[N, K]``; NaN marks a missing reward, ``inf`` is rejected."""
    rewards = check_float_tensor(rewards, name, "[N] or [N, K]")
    if rewards.ndim not in (1, 2):
        raise ValueError(f"{name} must have shape [N] or [N, K], got {tuple(rewards.shape)}")
    if torch.isinf(rewards).any():
        raise ValueError(f"{name} contains inf; use NaN for a missing reward and finite values otherwise")
    return rewards


def check_group_ids(group_ids: Any, num_samples: int, name: str = "group_ids") -> Tensor:
    """``group_ids`` must be an integer tensor of shape ``[N]`` (any values, groups of any size)."""
    if not isinstance(group_ids, Tensor):
        raise ValueError(f"{name} must be a torch.Tensor of shape [N]={[num_samples]}, got {type(group_ids).__name__}")
    if group_ids.dtype.is_floating_point or group_ids.dtype.is_complex or group_ids.dtype == torch.bool:
        raise ValueError(f"{name} must be an integer tensor (e.g. torch.long), got dtype {group_ids.dtype}")
    if tuple(group_ids.shape) != (num_samples,):
        raise ValueError(
            f"{name} must have shape [N]=[{num_samples}] (one id per sample), got {tuple(group_ids.shape)}"
        )
    return group_ids


def check_shape(value: Any, name: str, expected: tuple[int, ...], shape_hint: str) -> Tensor:
    """``value`` must be a floating tensor of exactly ``expected`` shape (no broadcasting)."""
    value = check_float_tensor(value, name, shape_hint)
    if tuple(value.shape) != tuple(expected):
        raise ValueError(f"{name} must have shape {shape_hint}={list(expected)}, got {list(value.shape)}")
    return value


def check_mask(mask: Any, expected: tuple[int, ...], dtype: torch.dtype, name: str = "mask") -> Tensor:
    """``mask`` must be ``[N, T]`` bool or float (1 = action trained); returned as ``dtype``."""
    if not isinstance(mask, Tensor):
        raise ValueError(f"{name} must be a torch.Tensor of shape [N, T]={list(expected)}, got {type(mask).__name__}")
    if tuple(mask.shape) != tuple(expected):
        raise ValueError(f"{name} must have shape [N, T]={list(expected)}, got {list(mask.shape)}")
    return mask.to(dtype)


def expand_advantages(advantages: Any, shape: tuple[int, int], name: str = "advantages") -> Tensor:
    """Accept advantages ``[N]`` (one per sequence) or ``[N, T]`` (one per action); return ``[N, T]``."""
    advantages = check_float_tensor(advantages, name, "[N] or [N, T]")
    n, t = shape
    if tuple(advantages.shape) == (n,):
        return advantages[:, None].expand(n, t)  # [N, T]
    if tuple(advantages.shape) == (n, t):
        return advantages
    raise ValueError(f"{name} must have shape [N]=[{n}] or [N, T]=[{n}, {t}], got {list(advantages.shape)}")
