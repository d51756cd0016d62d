"""The data-parallel layout's decisions (strategy, precision, FSDP units); the multi-process behaviour is tested in
tests/parallel/ and tests/trainer/test_recipe.py."""

from __future__ import annotations

import pytest
from torch import nn

from genalign.trainer.parallel import block_classes, resolve_mixed_precision, resolve_strategy, sharding_units


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(2, 2)


class Embedding(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.table = nn.Embedding(4, 2)


class Model(nn.Module):
    _no_split_modules = ["Block", "Embedding"]

    def __init__(self, tie: bool) -> None:
        super().__init__()
        self.embedding = Embedding()
        self.blocks = nn.ModuleList([Block(), Block()])
        self.head = nn.Linear(2, 4, bias=False)
        if tie:
            self.head.weight = self.embedding.table.weight


def test_units_are_the_declared_blocks_except_those_holding_a_tied_parameter():
    assert block_classes(Model(tie=False)) == {"Block", "Embedding"}
    untied, tied = Model(tie=False), Model(tie=True)
    assert sharding_units(untied) == [untied.embedding, *untied.blocks]
    assert sharding_units(tied) == list(tied.blocks)  # the tied embedding stays with the root, beside the head


def test_nested_blocks_are_left_to_their_parent():
    outer = Model(tie=False)
    outer.blocks[0].inner = Block()
    assert outer.blocks[0].inner not in sharding_units(outer)


def test_strategy_follows_the_process_count_and_the_accelerate_config(monkeypatch):
    monkeypatch.delenv("ACCELERATE_USE_FSDP", raising=False)
    monkeypatch.delenv("ACCELERATE_USE_DEEPSPEED", raising=False)
    assert resolve_strategy("auto", 1) == "none"
    assert resolve_strategy("auto", 4) == "ddp"
    assert resolve_strategy("fsdp", 1) == "fsdp"
    monkeypatch.setenv("ACCELERATE_USE_FSDP", "true")
    assert resolve_strategy("auto", 4) == "fsdp"
    with pytest.raises(ValueError, match="would train 4 unrelated copies"):
        resolve_strategy("none", 4)
    monkeypatch.setenv("ACCELERATE_USE_DEEPSPEED", "true")
    with pytest.raises(ValueError, match="DeepSpeed"):
        resolve_strategy("ddp", 4)


def test_mixed_precision_follows_the_launcher_and_refuses_a_conflict(monkeypatch):
    monkeypatch.delenv("ACCELERATE_MIXED_PRECISION", raising=False)
    assert resolve_mixed_precision("auto") == "no"
    assert resolve_mixed_precision("bf16") == "bf16"
    monkeypatch.setenv("ACCELERATE_MIXED_PRECISION", "bf16")
    assert resolve_mixed_precision("auto") == "bf16"  # accelerate launch --mixed_precision bf16 is honoured
    assert resolve_mixed_precision("bf16") == "bf16"
    with pytest.raises(ValueError, match=r"run\.mixed_precision = 'no' but accelerate launch asks for 'bf16'"):
        resolve_mixed_precision("no")
