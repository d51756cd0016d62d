"""Placement of parameters by ``run.distributed``: fsdp divides by the shard group (padded rows), ddp does not."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from genalign.planning.sharding import parameter_bytes, resolve_layout


def layout(distributed: str, gpus: int, shard_size: int = 0):
    return resolve_layout(distributed, gpus, shard_size=shard_size, reshard_after_forward=True, cpu_offload=False)


def test_fsdp_splits_dim0_into_padded_shards_and_ddp_keeps_everything():
    fsdp, ddp = layout("fsdp", 4), layout("ddp", 4)
    assert fsdp.group == 4 and fsdp.local_shape((10, 3)) == (3, 3)  # ceil(10 / 4) rows
    assert ddp.group == 1 and ddp.local_shape((10, 3)) == (10, 3)
    module = nn.Linear(8, 6, bias=False)  # 48 float32 elements
    assert parameter_bytes(module, fsdp) == 2 * 8 * 4  # ceil(6 / 4) = 2 rows
    assert parameter_bytes(module, ddp) == 48 * 4


def test_hybrid_sharding_shards_within_groups():
    hybrid = layout("fsdp", 8, shard_size=4)
    assert hybrid.group == 4 and hybrid.local_numel((8,)) == 2


def test_auto_is_none_for_one_gpu_and_ddp_for_more():
    assert layout("auto", 1).strategy == "none" and layout("auto", 2).strategy == "ddp"


def test_layouts_the_trainer_refuses_name_the_field():
    with pytest.raises(ValueError, match=r"run\.distributed = 'none' with 2 GPUs"):
        layout("none", 2)
    with pytest.raises(ValueError, match=r"run\.fsdp\.shard_size = 3 does not divide 8"):
        layout("fsdp", 8, shard_size=3)


def test_trainable_only_counts_parameters_with_gradient():
    module = nn.Sequential(nn.Linear(4, 4, bias=False), nn.Linear(4, 4, bias=False))
    module[0].requires_grad_(False)
    assert parameter_bytes(module, layout("none", 1), trainable_only=True) == 16 * 4
    assert torch.float32 == module[1].weight.dtype
