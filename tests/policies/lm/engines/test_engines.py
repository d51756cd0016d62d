"""Rollout engines: lean decoder vs Hugging Face forward, sampling filters, completion bookkeeping, hf vs static."""

from __future__ import annotations

import math
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest
import torch

from genalign.policies.lm.engines import ENGINES, SamplingParams, StopStringMatcher, finalize_completions
from genalign.policies.lm.engines.hf import HFGenerateEngine
from genalign.policies.lm.engines.lean_decoder import LeanDecoder, unsupported_reason
from genalign.policies.lm.engines.sampling import filtered_logits, sample_next_token
from genalign.policies.lm.engines.static import StaticCacheEngine
from genalign.policies.lm.logprobs import completion_scores
from genalign.policies.lm.tiny import build_tiny_causal_lm, build_tiny_tokenizer

torch.set_num_threads(1)


@pytest.fixture(scope="module", params=["qwen2", "llama"])
def tiny(request, tmp_path_factory):
    from transformers import AutoModelForCausalLM

    from genalign.policies.lm.tokenizer import load_tokenizer

    path = build_tiny_causal_lm(tmp_path_factory.mktemp(request.param), architecture=request.param, vocab_size=96)
    model = AutoModelForCausalLM.from_pretrained(str(path)).eval()
    return model, load_tokenizer(str(path))


def left_padded(tokenizer, texts: list[str]) -> tuple[torch.Tensor, torch.Tensor]:
    encoded = [tokenizer(t)["input_ids"] for t in texts]
    width = max(map(len, encoded))
    ids = torch.full((len(encoded), width), tokenizer.pad_token_id)
    mask = torch.zeros(len(encoded), width, dtype=torch.long)
    for row, seq in enumerate(encoded):
        ids[row, width - len(seq) :] = torch.tensor(seq)
        mask[row, width - len(seq) :] = 1
    return ids, mask


def params_for(tokenizer, **overrides) -> SamplingParams:
    base = {"max_new_tokens": 6, "eos_token_ids": (tokenizer.eos_token_id,), "pad_token_id": tokenizer.pad_token_id}
    return SamplingParams(**(base | overrides))


def test_lean_decoder_matches_hf_forward_on_prefill_and_decode(tiny):
    model, tokenizer = tiny
    ids, mask = left_padded(tokenizer, ["1 + 2 =", "what is 3 * 4 ? answer :", "a"])
    extra = torch.tensor([[5, 9], [11, 13], [17, 19]])  # two decoded tokens per row
    full_ids = torch.cat([ids, extra], dim=1)
    full_mask = torch.cat([mask, torch.ones_like(extra)], dim=1)
    positions = (full_mask.cumsum(1) - 1).clamp(min=0)
    with torch.no_grad():
        reference = model(input_ids=full_ids, attention_mask=full_mask, position_ids=positions).logits  # [B, L, V]
        decoder = LeanDecoder(model)
        cache = decoder.allocate(3, full_ids.shape[1], torch.device("cpu"), torch.float32)
        width = ids.shape[1]
        prefill = decoder.forward(ids, positions[:, :width], mask.bool(), cache, start=0)
        torch.testing.assert_close(prefill, reference[:, width - 1], atol=1e-5, rtol=0)
        for step in range(2):
            column = width + step
            logits = decoder.forward(
                full_ids[:, column : column + 1],
                positions[:, column : column + 1],
                torch.ones(3, 1, dtype=torch.bool),
                cache,
                column,
            )
            torch.testing.assert_close(logits, reference[:, column], atol=1e-5, rtol=0)


def test_lean_decoder_rejects_unsupported_architectures():
    from transformers import GPT2Config, GPT2LMHeadModel

    model = GPT2LMHeadModel(GPT2Config(vocab_size=32, n_embd=16, n_layer=1, n_head=2))
    assert "gpt2" in unsupported_reason(model)
    with pytest.raises(ValueError, match="engine='hf'"):
        LeanDecoder(model)


def test_top_k_and_top_p_filters_keep_the_hand_computed_sets():
    logits = torch.log(torch.tensor([[0.5, 0.2, 0.15, 0.1, 0.05]]))
    kept_k = torch.isfinite(filtered_logits(logits, top_k=2, top_p=1.0))
    assert kept_k.tolist() == [[True, True, False, False, False]]
    # Smallest set whose mass reaches 0.8: 0.5 + 0.2 + 0.15 = 0.85 (0.5 + 0.2 = 0.7 is not enough).
    kept_p = torch.isfinite(filtered_logits(logits, top_k=0, top_p=0.8))
    assert kept_p.tolist() == [[True, True, True, False, False]]
    # The most likely token always survives.
    assert torch.isfinite(filtered_logits(logits, top_k=0, top_p=0.01)).tolist() == [[True, False, False, False, False]]


def test_sample_next_token_returns_unfiltered_logprob_at_temperature():
    logits = torch.tensor([[2.0, 1.0, 0.0, -1.0]])
    params = SamplingParams(max_new_tokens=1, temperature=0.5, top_k=2)
    tokens, logp = sample_next_token(logits, params, torch.Generator().manual_seed(0))
    expected = torch.log_softmax(logits / 0.5, dim=-1)[0, tokens[0]]
    assert tokens.item() in (0, 1)
    assert logp.item() == pytest.approx(expected.item(), abs=1e-6)


def test_finalize_completions_masks_up_to_and_including_eos():
    eos, pad = 1, 0
    raw = torch.tensor([[5, 6, 1, 7], [1, 9, 9, 9], [5, 6, 7, 8]])
    logp = torch.full((3, 4), -0.5)
    out = finalize_completions(
        raw, logp, SamplingParams(max_new_tokens=4, eos_token_ids=(eos,), pad_token_id=pad), None
    )
    assert out.completion_mask.tolist() == [[1, 1, 1, 0], [1, 0, 0, 0], [1, 1, 1, 1]]
    assert out.completion_ids.tolist() == [[5, 6, 1, 0], [1, 0, 0, 0], [5, 6, 7, 8]]
    assert out.truncated.tolist() == [False, False, True]
    assert out.logp.tolist() == [[-0.5, -0.5, -0.5, 0.0], [-0.5, 0.0, 0.0, 0.0], [-0.5] * 4]


def test_stop_string_matcher_finds_first_completing_token_and_cuts_text():
    tokenizer = build_tiny_tokenizer(64)
    ids = tokenizer("a b STOP c STOP")["input_ids"]
    matcher = StopStringMatcher(tokenizer, ("STOP",))
    assert matcher.first_stop_length(ids) == 3
    assert matcher.first_stop_length(tokenizer("a b c")["input_ids"]) is None
    assert matcher.cut("a b STOP c") == "a b "
    assert not StopStringMatcher(tokenizer, ())


def bias_towards(model, token_id: int, logit_boost: float) -> None:
    """Make ``token_id`` likely by adding ``logit_boost`` through a head bias (a fresh parameter)."""
    head = model.get_output_embeddings()
    bias = torch.zeros(head.out_features)
    bias[token_id] = logit_boost
    head.bias = torch.nn.Parameter(bias)


@pytest.mark.parametrize("engine_name", ["hf", "static"])
def test_engine_logprobs_match_rescoring_with_early_stops(tiny, engine_name):
    model, tokenizer = tiny
    import copy

    model = copy.deepcopy(model)
    bias_towards(model, tokenizer.eos_token_id, 3.5)  # many rows end early, so the static engine drops rows
    engine = ENGINES.get(engine_name)(model, tokenizer, model_path="unused")
    ids, mask = left_padded(tokenizer, ["1 + 2 =", "what is 3 * 4 ? answer :"] * 6)
    out = engine.generate(
        ids, mask, params_for(tokenizer, max_new_tokens=10, temperature=0.8), torch.Generator().manual_seed(1)
    )
    lengths = out.completion_mask.sum(1)
    assert lengths.min() < lengths.max(), "the boost should end some completions early"
    ends_with_eos = out.completion_ids[torch.arange(len(ids)), lengths.long() - 1] == tokenizer.eos_token_id
    assert torch.equal(out.truncated, ~ends_with_eos)
    assert torch.all(out.truncated <= (lengths == 10))
    with torch.no_grad():
        logp = completion_scores(
            model, ids, mask, out.completion_ids, out.completion_mask, temperature=0.8, chunk_size=16
        ).logp
    assert (logp - out.logp).abs().max().item() < 1e-4
    assert torch.all(out.logp[out.completion_mask == 0] == 0)


@pytest.mark.parametrize("engine_name", ["hf", "static"])
def test_engines_stop_on_stop_strings(tiny, engine_name):
    model, tokenizer = tiny
    import copy

    model = copy.deepcopy(model)
    stop_id = tokenizer.convert_tokens_to_ids("STOP")
    bias_towards(model, stop_id, 4.0)
    engine = ENGINES.get(engine_name)(model, tokenizer, model_path="unused")
    ids, mask = left_padded(tokenizer, ["1 + 2 ="] * 8)
    params = params_for(tokenizer, max_new_tokens=12, stop=("STOP",), eos_token_ids=())
    out = engine.generate(ids, mask, params, torch.Generator().manual_seed(2))
    for row in range(len(ids)):
        length = int(out.completion_mask[row].sum())
        tokens = out.completion_ids[row, :length].tolist()
        if not out.truncated[row]:
            assert tokens[-1] == stop_id and stop_id not in tokens[:-1]
        else:
            assert stop_id not in tokens and length == 12
    assert (~out.truncated).sum() >= 6


def _first_token_counts(engine, ids, mask, params, draws: int, vocab: int) -> torch.Tensor:
    counts = torch.zeros(vocab)
    generator = torch.Generator().manual_seed(3)
    batch = ids.repeat(draws // 100, 1), mask.repeat(draws // 100, 1)
    for _ in range(100):
        out = engine.generate(*batch, params, generator)
        counts += torch.bincount(out.completion_ids[:, 0], minlength=vocab).float()
    return counts


@pytest.mark.parametrize("top_k, top_p", [(0, 1.0), (8, 0.9)])
def test_hf_and_static_sample_the_same_distribution(tiny, top_k, top_p):
    """Chi-square of both engines' first-token counts against the exact filtered distribution."""
    model, tokenizer = tiny
    ids, mask = left_padded(tokenizer, ["what is 3 * 4 ? answer :"])
    params = params_for(tokenizer, max_new_tokens=1, temperature=0.7, top_k=top_k, top_p=top_p)
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=mask).logits[0, -1]
    exact = filtered_logits(logits[None] / 0.7, top_k=top_k, top_p=top_p).softmax(-1)[0]  # [V]
    draws = 4000
    support = exact > 0
    degrees = int(support.sum()) - 1
    for engine in (HFGenerateEngine(model, tokenizer), StaticCacheEngine(model, tokenizer)):
        counts = _first_token_counts(engine, ids, mask, params, draws, exact.numel())
        assert counts[~support].sum() == 0, "a filtered-out token was sampled"
        expected = exact[support] * draws
        chi2 = ((counts[support] - expected) ** 2 / expected).sum().item()
        assert chi2 < degrees + 6 * math.sqrt(2 * degrees), f"{type(engine).__name__}: chi2={chi2:.1f}, df={degrees}"


def test_vllm_engine_import_guard_names_the_fix(tiny):
    import importlib.util

    if importlib.util.find_spec("vllm") is not None and torch.cuda.is_available():
        pytest.skip("vllm and a GPU are present; the guard does not apply")
    model, tokenizer = tiny
    with pytest.raises((ImportError, RuntimeError), match="engine='static'"):
        ENGINES.get("vllm")(model, tokenizer, model_path="unused")


def test_unknown_engine_name_suggests_the_closest():
    with pytest.raises(ValueError, match="Did you mean 'static'"):
        ENGINES.get("statc")


def test_inverse_cdf_sampler_matches_the_categorical_distribution_and_skips_zero_mass():
    from genalign.policies.lm.engines.sampling import sample_from_probs

    probs = torch.tensor([0.0, 0.5, 0.0, 0.3, 0.2, 0.0])
    draws = 20_000
    tokens = sample_from_probs(probs.expand(draws, -1).contiguous(), torch.Generator().manual_seed(0))
    frequencies = torch.bincount(tokens, minlength=6).float() / draws
    assert frequencies[probs == 0].sum() == 0
    torch.testing.assert_close(frequencies, probs, atol=0.015, rtol=0)
