"""Optimizer state bytes, by hand: one formula per optimizer of ``optim.optimizer``."""

from __future__ import annotations

import pytest
import torch

from genalign.planning.optimizer_state import optimizer_state_bytes, tensor_state_bytes


def test_adamw_keeps_two_moments_in_the_parameter_dtype():
    assert tensor_state_bytes((10, 20), torch.float32, "adamw") == 2 * 200 * 4  # 8 bytes per float32 parameter
    assert tensor_state_bytes((10, 20), torch.bfloat16, "adamw_fused") == 2 * 200 * 2


def test_adafactor_factors_matrices_and_keeps_vectors_whole():
    assert tensor_state_bytes((10, 20), torch.float32, "adafactor") == (10 + 20) * 4  # row + column variances
    assert tensor_state_bytes((3, 10, 20), torch.float32, "adafactor") == (3 * 10 + 3 * 20) * 4
    assert tensor_state_bytes((7,), torch.float32, "adafactor") == 7 * 4


def test_sgd_has_state_only_with_momentum():
    assert tensor_state_bytes((5, 5), torch.float32, "sgd") == 0
    assert tensor_state_bytes((5, 5), torch.float32, "sgd", momentum=0.9) == 25 * 4


def test_adamw_8bit_is_one_byte_per_moment_plus_block_scales_and_small_tensors_stay_32bit():
    assert tensor_state_bytes((64, 64), torch.float32, "adamw_8bit") == 2 * (4096 + 16 * 4)  # 16 blocks of 256
    assert tensor_state_bytes((100,), torch.float32, "adamw_8bit") == 2 * 100 * 4


def test_total_sums_tensors_and_unknown_optimizer_is_refused():
    assert optimizer_state_bytes([((2, 3), torch.float32), ((4,), torch.float32)], "adamw") == 8 * 10
    with pytest.raises(ValueError, match=r"optim\.optimizer = 'lion'"):
        tensor_state_bytes((2,), torch.float32, "lion")
