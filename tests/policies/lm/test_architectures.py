"""The causal-LM architectures beyond Llama / Qwen2 (Qwen3, Qwen3-MoE, Gemma3), built tiny from their real config
classes: the static engine's lean decoder equals the Hugging Face forward (Qwen3's q/k norms, Qwen3-MoE's routed
experts, Gemma3's sliding-window layers, sandwich norms and final logit soft-capping), both engines' behaviour
log-probs equal the scoring pass, and a model the lean decoder cannot run samples through ``hf`` with a warning."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest
import torch

from genalign.policies.lm.causal import CausalLMPolicyConfig, build_policy
from genalign.policies.lm.engines import ENGINES, SamplingParams
from genalign.policies.lm.engines.hf import HFGenerateEngine
from genalign.policies.lm.engines.lean_decoder import LeanDecoder, layer_windows, soft_cap, unsupported_reason
from genalign.policies.lm.engines.turn_cache import turn_cache_unsupported_reason
from genalign.policies.lm.logprobs import completion_scores, naive_completion_logprobs, output_head
from genalign.policies.lm.tiny import build_tiny_causal_lm

torch.set_num_threads(1)
NEW_ARCHITECTURES = ("qwen3", "qwen3_moe", "gemma3")
#: Gemma3 with its final logits soft-capped (Gemma 2's default is 30; a small cap makes it bind on random logits)
CAPPED = {"final_logit_softcapping": 2.0}


@pytest.fixture(scope="module")
def model_dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("architectures")
    dirs = {arch: build_tiny_causal_lm(root / arch, architecture=arch, vocab_size=96) for arch in NEW_ARCHITECTURES}
    dirs["gemma3_capped"] = build_tiny_causal_lm(
        root / "gemma3_capped", architecture="gemma3", vocab_size=96, config_overrides=CAPPED
    )
    return dirs


def load(path):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(str(path)).eval()


def test_tiny_models_keep_what_makes_each_architecture_itself(model_dirs):
    qwen3, moe, gemma = (load(model_dirs[a]) for a in NEW_ARCHITECTURES)
    assert qwen3.config.model_type == "qwen3" and hasattr(qwen3.model.layers[0].self_attn, "q_norm")
    assert type(moe.model.layers[0].mlp).__name__ == "Qwen3MoeSparseMoeBlock"
    assert (moe.config.num_experts, moe.config.num_experts_per_tok) == (4, 2)
    assert gemma.config.model_type == "gemma3_text" and layer_windows(gemma.config) == [4, None]
    assert gemma.model.embed_tokens.embed_scale.item() == pytest.approx(32**0.5)


@pytest.mark.parametrize("arch", [*NEW_ARCHITECTURES, "gemma3_capped"])
def test_lean_decoder_matches_hf_forward_past_the_sliding_window(model_dirs, arch):
    """Prefill of left-padded prompts, then three decoded tokens: 11 columns, past Gemma3's 4-token window."""
    model = load(model_dirs[arch])
    ids = torch.tensor([[0, 0, 5, 6, 7, 8, 9, 10], [11, 12, 13, 14, 15, 16, 17, 18]])
    mask = torch.tensor([[0, 0, 1, 1, 1, 1, 1, 1], [1] * 8])
    extra = torch.tensor([[20, 21, 22], [23, 24, 25]])
    full_ids, full_mask = torch.cat([ids, extra], 1), torch.cat([mask, torch.ones_like(extra)], 1)
    positions = (full_mask.cumsum(1) - 1).clamp(min=0)
    width = ids.shape[1]
    with torch.no_grad():
        reference = model(input_ids=full_ids, attention_mask=full_mask, position_ids=positions).logits  # [B, L, V]
        decoder = LeanDecoder(model)
        cache = decoder.allocate(2, full_ids.shape[1], torch.device("cpu"), torch.float32)
        logits = [decoder.forward(ids, positions[:, :width], mask.bool(), cache, start=0)]
        for column in range(width, full_ids.shape[1]):
            step = slice(column, column + 1)
            logits.append(
                decoder.forward(full_ids[:, step], positions[:, step], torch.ones(2, 1).bool(), cache, column)
            )
    torch.testing.assert_close(torch.stack(logits, 1), reference[:, width - 1 :], atol=2e-5, rtol=0)


def test_soft_capping_bounds_the_logits_and_the_scoring_head_applies_it(model_dirs):
    assert soft_cap(torch.tensor([0.0, 100.0, -100.0]), 2.0).tolist() == pytest.approx([0.0, 2.0, -2.0])
    model = load(model_dirs["gemma3_capped"])
    prompt, prompt_mask = torch.tensor([[0, 5, 6, 7]]), torch.tensor([[0, 1, 1, 1]])
    completion, completion_mask = torch.tensor([[8, 9, 10, 11, 12]]), torch.ones(1, 5)
    with torch.no_grad():
        chunked = completion_scores(model, prompt, prompt_mask, completion, completion_mask, temperature=0.7,
                                    chunk_size=2).logp  # fmt: skip
        naive = naive_completion_logprobs(model, prompt, prompt_mask, completion, completion_mask, temperature=0.7)
        hidden = torch.randn(3, 32)
        capped = output_head(model)(hidden)
    torch.testing.assert_close(chunked, naive, atol=1e-5, rtol=0)
    torch.testing.assert_close(capped, 2.0 * torch.tanh(model.lm_head(hidden) / 2.0))
    assert capped.abs().max() < 2.0


@pytest.mark.parametrize("arch", NEW_ARCHITECTURES)
@pytest.mark.parametrize("engine", ["hf", "static"])
def test_both_engines_record_the_log_probs_the_scoring_pass_gives(model_dirs, arch, engine):
    config = CausalLMPolicyConfig(model=str(model_dirs[arch]), max_new_tokens=8, temperature=0.9, engine=engine)
    policy = build_policy(config, "cpu")
    rollout = policy.rollout([{"prompt": "1 + 2 ="}, {"prompt": "what is 3 * 4 ? answer :"}], group_size=3)
    with torch.no_grad():
        whole = policy.score(rollout).logp
        halves = torch.cat([policy.score(rollout.select(part)).logp for part in ([0, 1, 2], [3, 4, 5])])
    assert (whole - rollout.old_logp).abs().max().item() < 1e-4  # sampled through the engine's own cache
    assert (whole - halves).abs().max().item() <= 1e-6


def test_an_architecture_the_lean_decoder_cannot_run_samples_through_hf_with_a_warning(tmp_path):
    from transformers import GPT2Config, GPT2LMHeadModel

    from genalign.policies.lm.tiny import build_tiny_tokenizer

    model = GPT2LMHeadModel(GPT2Config(vocab_size=96, n_embd=16, n_layer=1, n_head=2)).eval()
    assert "'gpt2' is not one of" in unsupported_reason(model)
    with pytest.warns(UserWarning, match="cannot run 'gpt2-tiny'.*sampling with engine='hf' instead"):
        engine = ENGINES.get("static")(model, build_tiny_tokenizer(96), model_path="gpt2-tiny")
    assert isinstance(engine, HFGenerateEngine)
    out = engine.generate(torch.tensor([[5, 6]]), torch.ones(1, 2), SamplingParams(max_new_tokens=3, pad_token_id=0),
                          torch.Generator().manual_seed(0))  # fmt: skip
    assert out.completion_ids.shape == (1, 3)


def test_kept_turn_caches_refuse_sliding_window_layers(model_dirs):
    assert turn_cache_unsupported_reason(load(model_dirs["qwen3"])) is None
    reason = turn_cache_unsupported_reason(load(model_dirs["gemma3"]))
    assert "sliding-window layers" in reason
