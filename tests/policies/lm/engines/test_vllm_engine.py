"""The vllm engine end to end on CPU: the real HTTP client and server code around the fake vLLM backend
(tests/policies/lm/engines/vllm_fakes.py), with the weight channel looped back in memory. Rollout -> update -> rollout samples the
new weights; the policy's re-scoring reproduces the engine's behaviour log-probs (plain and LoRA adapter); several
ranks on one server; the colocated sleep / wake sequence."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest
import torch

from genalign.policies.lm.causal import CausalLMPolicyConfig, LoRAConfig, build_policy
from genalign.policies.lm.engines.base import SamplingParams
from genalign.policies.lm.engines.vllm import engine as engine_module
from genalign.policies.lm.engines.vllm.client import HTTPServerClient
from genalign.policies.lm.engines.vllm.engine import VLLMEngine
from genalign.policies.lm.engines.vllm.options import VLLMOptions
from genalign.policies.lm.logprobs import completion_scores
from genalign.policies.lm.tiny import build_tiny_causal_lm
from genalign.policies.lm.tokenizer import load_tokenizer
from tests.policies.lm.engines.vllm_fakes import FakeVLLMBackend, LoopbackSender, serving

torch.set_num_threads(1)
PROMPTS = [{"prompt": "1 + 2 ="}, {"prompt": "what is 3 * 4 ? answer :"}]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return str(build_tiny_causal_lm(tmp_path_factory.mktemp("engine"), architecture="qwen2", vocab_size=96))


def rescored(model, prompt_ids, prompt_mask, generation, temperature):
    with torch.no_grad():
        scores = completion_scores(
            model,
            prompt_ids,
            prompt_mask,
            generation.completion_ids,
            generation.completion_mask,
            temperature=temperature,
            chunk_size=64,
        )
    return scores.logp * generation.completion_mask


def test_rollout_update_rollout_samples_the_new_weights(model_dir):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir).eval()
    tokenizer = load_tokenizer(model_dir)
    backend = FakeVLLMBackend(model_dir)
    params = SamplingParams(max_new_tokens=6, temperature=0.8, eos_token_ids=(tokenizer.eos_token_id,), pad_token_id=0)
    ids = torch.tensor([[0, 0, 12, 13, 14], [15, 16, 17, 18, 19], [0, 20, 21, 22, 23]])
    mask = (ids != 0).long()
    with serving(backend) as url:
        engine = VLLMEngine(
            model,
            tokenizer,
            model_path=model_dir,
            options=VLLMOptions(server_url=url),
            api=HTTPServerClient(url),
            sender=LoopbackSender(backend),
        )
        first = engine.generate(ids, mask, params, torch.Generator().manual_seed(0))
        torch.testing.assert_close(first.logp, rescored(model, ids, mask, first, 0.8), atol=1e-4, rtol=0)
        old = model.lm_head.weight.detach().clone()
        with torch.no_grad():
            model.model.embed_tokens.weight.mul_(3.0)  # tied head: a sharper, different distribution
        second = engine.generate(ids, mask, params, torch.Generator().manual_seed(0))
        torch.testing.assert_close(second.logp, rescored(model, ids, mask, second, 0.8), atol=1e-4, rtol=0)
        assert not torch.equal(old, model.lm_head.weight)
        third = engine.generate(ids, mask, params, torch.Generator().manual_seed(0))
    assert engine.sync.weight_pushes == 2  # first rollout and after the change; none for the unchanged third
    assert torch.equal(second.completion_ids, third.completion_ids)  # same seeds, same weights: same samples
    assert backend.calls.count("start") == 2


def vllm_policy(model_dir, backend, url, **overrides):
    config = CausalLMPolicyConfig(model=model_dir, max_new_tokens=8, temperature=0.9, engine="hf", **overrides)
    policy = build_policy(config, "cpu")
    policy.engine = VLLMEngine(
        policy.model,
        policy.tokenizer,
        model_path=model_dir,
        options=VLLMOptions(server_url=url),
        api=HTTPServerClient(url),
        sender=LoopbackSender(backend),
    )
    return policy


def test_policy_rescoring_reproduces_the_vllm_behaviour_logprobs(model_dir):
    backend = FakeVLLMBackend(model_dir)
    with serving(backend) as url:
        policy = vllm_policy(model_dir, backend, url, stop=["STOP"])
        rollout = policy.rollout(PROMPTS, group_size=3)
    assert rollout.old_logp.shape == rollout.action_mask.shape and rollout.action_mask.sum() > 0
    with torch.no_grad():
        scored = policy.score(rollout).logp
    assert (scored - rollout.old_logp).abs().max().item() < 1e-4
    assert len(set(map(tuple, rollout.per_sample["completion_ids"].tolist()))) > 1  # one seed per row


def test_lora_policy_samples_through_the_pushed_adapter(model_dir):
    backend = FakeVLLMBackend(model_dir, lora_enabled=True)
    with serving(backend) as url:
        policy = vllm_policy(model_dir, backend, url, lora=LoRAConfig(rank=4, target_modules=["q_proj", "v_proj"]))
        assert policy.engine.sync.use_adapter
        with torch.no_grad():
            for param in policy.model.parameters():
                if param.requires_grad:
                    param.add_(0.3)  # as after some updates
        rollout = policy.rollout(PROMPTS, group_size=2)
        with torch.no_grad():
            with_adapters = policy.score(rollout).logp
            without = policy.reference_logprobs(rollout)
        assert (with_adapters - rollout.old_logp).abs().max().item() < 1e-4
        assert (without - rollout.old_logp).abs().max().item() > 1e-3
        assert backend.adapter is not None and backend.calls.count("load_adapter") == 1


def test_lora_that_vllm_cannot_serve_falls_back_to_merged_weights(model_dir):
    backend = FakeVLLMBackend(model_dir, lora_enabled=True)
    with serving(backend) as url:
        lora = LoRAConfig(rank=4, target_modules=["q_proj", "v_proj"], use_dora=True)
        with pytest.warns(UserWarning, match="pushing merged weights, vLLM cannot serve the adapter: DoRA"):
            policy = vllm_policy(model_dir, backend, url, lora=lora)
        assert not policy.engine.sync.use_adapter
        rollout = policy.rollout(PROMPTS, group_size=2)
        with torch.no_grad():
            assert (policy.score(rollout).logp - rollout.old_logp).abs().max().item() < 1e-4
    assert backend.adapter is None and "load_adapter" not in backend.calls


def test_forcing_adapter_mode_on_an_unsupported_adapter_names_the_reason(model_dir):
    backend = FakeVLLMBackend(model_dir, lora_enabled=True)
    config = CausalLMPolicyConfig(model=model_dir, engine="hf", lora=LoRAConfig(rank=4, use_dora=True))
    policy = build_policy(config, "cpu")
    with pytest.raises(ValueError, match="cannot serve this adapter: DoRA"):
        VLLMEngine(
            policy.model,
            policy.tokenizer,
            model_path=model_dir,
            options=VLLMOptions(lora="adapter"),
            api=backend,
            sender=LoopbackSender(backend),
        )


def test_ranks_sharing_a_server_push_once_from_rank_zero(model_dir, monkeypatch):
    from transformers import AutoModelForCausalLM

    backend = FakeVLLMBackend(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir).eval()
    tokenizer = load_tokenizer(model_dir)
    engine = VLLMEngine(
        model, tokenizer, model_path=model_dir, options=VLLMOptions(), api=backend, sender=LoopbackSender(backend)
    )
    barriers = []
    monkeypatch.setattr(torch.distributed, "barrier", lambda: barriers.append(1))
    params = SamplingParams(max_new_tokens=3, eos_token_ids=(tokenizer.eos_token_id,), pad_token_id=0)
    ids, mask = torch.tensor([[12, 13]]), torch.ones(1, 2)
    monkeypatch.setattr(engine_module, "_distributed", lambda: (1, 2))
    engine.generate(ids, mask, params, torch.Generator().manual_seed(0))
    assert "start" not in backend.calls and "generate" in backend.calls and barriers == [1]
    monkeypatch.setattr(engine_module, "_distributed", lambda: (0, 2))
    engine.generate(ids, mask, params, torch.Generator().manual_seed(0))
    assert backend.calls.count("start") == 1 and barriers == [1, 1]


def test_a_server_on_the_trainers_gpu_sleeps_and_only_rank_zero_drives_it(model_dir, monkeypatch):
    from transformers import AutoModelForCausalLM

    backend = FakeVLLMBackend(
        model_dir, weight_transfer_backend="ipc", enable_sleep_mode=True, gpu_memory_utilization=0.4
    )
    model = AutoModelForCausalLM.from_pretrained(model_dir).eval()
    tokenizer = load_tokenizer(model_dir)
    options = VLLMOptions(weight_transfer="ipc")
    engine = VLLMEngine(
        model, tokenizer, model_path=model_dir, options=options, api=backend, sender=LoopbackSender(backend)
    )
    params = SamplingParams(max_new_tokens=3, eos_token_ids=(tokenizer.eos_token_id,), pad_token_id=0)
    barriers = []
    monkeypatch.setattr(torch.distributed, "barrier", lambda: barriers.append(1))
    monkeypatch.setattr(engine_module, "_distributed", lambda: (1, 2))
    backend.calls.clear()
    engine.generate(torch.tensor([[12, 13]]), torch.ones(1, 2), params, torch.Generator().manual_seed(0))
    assert [c for c in backend.calls if c != "info"] == ["generate"] and barriers == [1, 1]
    monkeypatch.setattr(engine_module, "_distributed", lambda: (0, 2))
    backend.calls.clear()
    engine.generate(torch.tensor([[12, 13]]), torch.ones(1, 2), params, torch.Generator().manual_seed(0))
    sequence = [c for c in backend.calls if c != "info"]
    assert sequence == ["wake:weights", "init", "start", "update", "finish", "wake:kv_cache", "generate", "sleep1"]


def test_colocated_engine_sleeps_between_rollouts_and_wakes_weights_before_the_push(model_dir):
    from transformers import AutoModelForCausalLM

    backend = FakeVLLMBackend(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir).eval()
    tokenizer = load_tokenizer(model_dir)
    options = VLLMOptions(mode="colocated")
    engine = VLLMEngine(
        model, tokenizer, model_path=model_dir, options=options, api=backend, sender=LoopbackSender(backend)
    )
    assert backend.calls[-1] == "sleep1"  # training runs first
    backend.calls.clear()
    params = SamplingParams(max_new_tokens=3, eos_token_ids=(tokenizer.eos_token_id,), pad_token_id=0)
    engine.generate(torch.tensor([[12, 13]]), torch.ones(1, 2), params, torch.Generator().manual_seed(0))
    sequence = [c for c in backend.calls if c != "info"]
    assert sequence == ["wake:weights", "init", "start", "update", "finish", "wake:kv_cache", "generate", "sleep1"]


def test_the_gpu_check_round_trip_sees_the_new_weights_through_the_fake_server(model_dir):
    from transformers import AutoModelForCausalLM

    from genalign.policies.lm.engines.vllm.check import roundtrip

    backend = FakeVLLMBackend(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir).eval()
    tokenizer = load_tokenizer(model_dir)
    with serving(backend) as url:
        engine = VLLMEngine(
            model,
            tokenizer,
            model_path=model_dir,
            options=VLLMOptions(server_url=url),
            api=HTTPServerClient(url),
            sender=LoopbackSender(backend),
        )
        figures = roundtrip(engine, model, tokenizer)
    assert figures["new_weights_seen"] and figures["weight_pushes"] == 2, figures
    assert figures["mean_abs_dlogp_vs_updated_model"] < 1e-4 < figures["mean_abs_dlogp_vs_old_model"]
