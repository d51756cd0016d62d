"""The plan of the LM demo, component by component, against hand arithmetic on its exact parameter count."""

from __future__ import annotations

import os

import pytest

from genalign.config import load_config
from genalign.planning import NO_OVERHEADS, plan_memory

os.environ.setdefault("HF_HUB_OFFLINE", "1")
DEMO = "configs/demo_arith_grpo.yaml"


def plan(overrides=(), gpus=1, **kw):
    return plan_memory(load_config(DEMO, list(overrides)), gpus=gpus, gpu_memory_gb=80, overheads=NO_OVERHEADS, **kw)


def line(plan_, name: str) -> float:
    return sum(c.bytes for c in plan_.components if c.name == name)


@pytest.fixture(scope="module")
def single():
    return plan()


def test_resident_lines_follow_from_the_parameters(single):
    n = single.parameters.total
    assert single.parameters.trainable == n  # full fine-tuning
    assert line(single, "weights") == 4 * n  # float32
    assert line(single, "gradients") == 4 * n
    assert line(single, "optimizer state") == 8 * n  # AdamW: two float32 moments
    assert line(single, "reference policy") == 0  # no KL in the demo


def test_fsdp_divides_sharded_state_and_ddp_does_not():
    fsdp, ddp = plan(["run.distributed=fsdp"], gpus=2), plan(["run.distributed=ddp"], gpus=2)
    one = plan()
    for name in ("weights", "gradients", "optimizer state"):
        assert line(ddp, name) == line(one, name)
        assert line(one, name) / 2 <= line(fsdp, name) < line(one, name) / 2 * 1.05  # padded rows at most
    assert line(fsdp, "gathered weights (sampling)") == line(one, "weights")  # every unit gathered to sample
    assert line(one, "gathered weights (sampling)") == 0


def test_cpu_offload_moves_the_shards_off_the_gpu():
    offloaded = plan(["run.distributed=fsdp", "run.fsdp.cpu_offload=true"], gpus=2)
    assert line(offloaded, "weights") == line(offloaded, "optimizer state") == 0
    assert line(offloaded, "gathered weights (update)") > 0


def test_lora_trains_adapters_only_and_the_kl_reference_is_free():
    lora = plan(["policy.lora.rank=4", "algorithm.kl_coef=0.01"])
    assert 0 < lora.parameters.trainable < lora.parameters.total / 10
    assert line(lora, "optimizer state") == 8 * lora.parameters.trainable
    assert line(lora, "reference policy") == 0  # adapters disabled serve as the reference


def test_a_kl_without_lora_loads_a_frozen_copy():
    with_kl = plan(["algorithm.kl_coef=0.01"])
    assert line(with_kl, "reference policy") == line(with_kl, "weights")


def test_a_preference_objective_against_the_reference_loads_it_like_a_kl():
    dpo = plan(["algorithm.objective=group_dpo", "algorithm.aggregation=seq_mean_token_mean", "algorithm.clip=ppo"])
    assert line(dpo, "reference policy") == line(dpo, "weights")  # it reads ref_logp


def test_gradient_checkpointing_and_smaller_micro_batches_lower_the_activations(single):
    assert line(plan(["policy.gradient_checkpointing=true"]), "activations") < line(single, "activations")
    assert line(plan(["algorithm.micro_batch_size=64"]), "activations") < line(single, "activations")


def test_fits_against_the_memory_and_the_peak_is_the_larger_phase(single):
    assert single.tensors_peak == max(single.total("rollout"), single.total("update"))
    assert single.fits
    tight = plan_memory(load_config(DEMO), gpus=1, gpu_memory_gb=single.peak / 1e9 / 2, overheads=NO_OVERHEADS)
    assert not tight.fits
