"""The KV cache kept across the turns of a multi-turn rollout (engines/turn_cache.py): each turn encodes only its new
tokens, rows that end or drop out keep the layout correct, and the sampled tokens and behaviour log-probs are those
of re-encoding the whole conversation every turn (same seed, float32 CPU: identical tokens, log-probs within 1e-5;
bit-equality is impossible, the same context being computed in other chunks, and a token could differ where its
uniform falls within that rounding of a boundary of the cumulative distribution: not on these seeds)."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest
import torch

from genalign.policies.lm.engines import SamplingParams
from genalign.policies.lm.engines.static import StaticCacheEngine
from genalign.policies.lm.engines.turn_cache import TurnCacheEngine, TurnCaches, common_prefix
from genalign.policies.lm.tiny import build_tiny_causal_lm

torch.set_num_threads(1)


@pytest.fixture(scope="module", params=["qwen2", "llama"])
def model(request, tmp_path_factory):
    from transformers import AutoModelForCausalLM

    path = build_tiny_causal_lm(tmp_path_factory.mktemp(request.param), architecture=request.param, vocab_size=96)
    return AutoModelForCausalLM.from_pretrained(str(path)).eval()


def left_padded(contexts: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(map(len, contexts))
    ids = torch.zeros(len(contexts), width, dtype=torch.long)
    mask = torch.zeros(len(contexts), width, dtype=torch.long)
    for row, context in enumerate(contexts):
        ids[row, width - len(context) :] = torch.tensor(context)
        mask[row, width - len(context) :] = 1
    return ids, mask


def test_common_prefix_and_kept_lengths_by_hand():
    assert common_prefix([4, 5, 6], [4, 5, 6, 7]) == 3
    assert common_prefix([4, 5, 6], [4, 9, 6, 7]) == 1
    assert common_prefix([4, 5, 6], [4, 5]) == 2
    assert common_prefix([], [1]) == 0
    caches = TurnCaches(ids={"a": [1, 2, 3], "b": [1, 2, 3], "c": [7, 8]})
    # a: extends its cache (all 3 kept); b: its context diverges after 2; c: nothing new (all but the last token);
    # d: no cache yet
    contexts = [[1, 2, 3, 4, 5], [1, 2, 9], [7, 8], [1, 2]]
    assert caches.kept_lengths(["a", "b", "c", "d"], contexts) == [3, 2, 1, 0]


def test_kept_turns_sample_what_re_encoding_samples(model):
    """Four conversations over three turns: rows end their turns at different steps (many end tokens), two rows drop
    out after the first turn, the answers differ in length, and one row's next context keeps only part of its turn
    (a budget cut): the kept cache samples the tokens the re-encoding does, with the same log-probs up to 1e-5."""
    params = SamplingParams(max_new_tokens=6, temperature=0.9, eos_token_ids=tuple(range(4, 16)), pad_token_id=0)
    kept, reencoded = TurnCacheEngine(model, None), StaticCacheEngine(model, None)
    generators = [torch.Generator().manual_seed(3) for _ in range(2)]
    caches = TurnCaches()
    contexts = {0: [2, 20, 21, 22], 1: [2, 30], 2: [2, 40, 41, 42, 43, 44, 45], 3: [2, 50, 51]}
    answers = {0: [60, 61], 1: [62, 63, 64, 65, 66], 2: [67], 3: [68, 69, 70]}
    active, max_gap, ended_early = [0, 1, 2, 3], 0.0, set()
    for turn in range(3):
        rows = [contexts[key] for key in active]
        ours = kept.generate(caches, active, rows, params, generators[0])
        ids, mask = left_padded(rows)
        reference = reencoded.generate(ids, mask, params, generators[1])
        assert torch.equal(ours.completion_ids, reference.completion_ids), f"turn {turn}: the same tokens"
        assert torch.equal(ours.completion_mask, reference.completion_mask)
        max_gap = max(max_gap, float((ours.logp - reference.logp).abs().max()))
        lengths = ours.completion_mask.sum(1).long().tolist()
        ended_early |= {key for key, n in zip(active, lengths) if n < params.max_new_tokens}
        for row, key in enumerate(active):
            sampled = ours.completion_ids[row, : lengths[row]].tolist()
            if turn == 0 and key == 3:
                sampled = sampled[:1]  # a budget cut: the cache holds more of the turn than the context keeps
            contexts[key] = contexts[key] + sampled + answers[key]
        if turn == 0:
            active = [1, 3]  # 0 and 2 end after their first turn
        assert sorted(key for keys, _ in caches.pieces for key in keys) == sorted(caches.ids) == sorted(active + (
            [0, 2] if turn == 0 else []))  # fmt: skip
    assert max_gap <= 1e-5
    assert len(ended_early) >= 2, "the test needs turns that end early (finished rows leave the decode batch)"


def test_a_turn_encodes_only_its_new_tokens(model):
    """After the first turn, the prefill of a turn is the last sampled token and the answer of each row (padded to
    the longest), not the conversation; the cache is continued in place while it holds the same rows, and laid out
    anew, holding the active rows only, once one has left."""
    params = SamplingParams(max_new_tokens=4, temperature=1.0, eos_token_ids=(), pad_token_id=0)
    engine, caches = TurnCacheEngine(model, None), TurnCaches()
    calls = []
    forward = engine.decoder.forward

    def recording(tokens, positions, token_mask, cache, start):
        calls.append((tokens.shape[1], tuple(cache.key_mask.shape), start, id(cache)))
        return forward(tokens, positions, token_mask, cache, start)

    engine.decoder.forward = recording
    generator = torch.Generator().manual_seed(0)
    contexts = [[2, *range(20, 40)], [2, *range(40, 50)]]  # prompts of 21 and 11 tokens
    answers = [[60, 61, 62], [63]]

    def next_contexts(turn):
        return [c + turn.completion_ids[i].tolist() + a for i, (c, a) in enumerate(zip(contexts, answers))]

    turn = engine.generate(caches, [0, 1], contexts, params, generator)
    # the prompts' prefill; capacity: the prompt, the turn, and room for TURNS_AHEAD = 2 next turns in place, each of
    # min(21, 4) new tokens (no answer seen yet) + 4 sampled
    assert calls[0][:3] == (21, (2, 21 + 4 + 2 * (4 + 4)), 0)
    assert [width for width, *_ in calls[1:]] == [1, 1, 1]  # then one token per decode step (the 4th is not fed)
    contexts, first_cache = next_contexts(turn), calls[0][3]
    calls.clear()
    turn = engine.generate(caches, [0, 1], contexts, params, generator)
    # in place: row 0 holds 21 + 3 fed tokens in columns 0-23; new: its unfed token + 3 answer tokens from column 24
    assert calls[0] == (4, (2, 41), 24, first_cache)
    assert caches.ids[0] == contexts[0] + caches.ids[0][len(contexts[0]) :] and len(caches.ids[0]) == 28 + 3
    contexts = next_contexts(turn)
    calls.clear()
    engine.generate(caches, [1], contexts[1:], params, generator)  # row 0 has ended
    # anew, row 1 only: its 11 + 3 + 1 + 1 + 3 held tokens right-aligned to column 19, its 1 + 1 new tokens after;
    # room for 2 next turns of the largest answer so far (4 new tokens) + 4 sampled
    assert calls[0][:3] == (2, (1, 19 + 2 + 4 + 2 * (4 + 4)), 19) and calls[0][3] != first_cache
    assert list(caches.ids) == [1] and [keys for keys, _ in caches.pieces] == [[1]]


def test_answers_longer_than_a_turn_are_continued_in_place_after_one_new_layout(model):
    """Prompts of 3 tokens, turns of 4, answers of 10: the first layout leaves room for 2 turns of min(3, 4) + 4
    columns; turn 1 (1 + 10 new tokens + 4) fits it; turn 2 does not, and its new layout leaves room for 2 turns of the
    largest answer seen (11 new tokens + 4), so turns 3 and 4 continue in place: 2 layouts in 5 turns (room for
    min(chunk, steps) new tokens only would lay out every turn from turn 2 on)."""
    params = SamplingParams(max_new_tokens=4, temperature=1.0, eos_token_ids=(), pad_token_id=0)
    engine, caches = TurnCacheEngine(model, None), TurnCaches()
    layouts = []
    allocate = engine.decoder.allocate

    def recording(*args, **kwargs):
        layouts.append(args[1])  # capacity
        return allocate(*args, **kwargs)

    engine.decoder.allocate = recording
    generator = torch.Generator().manual_seed(0)
    contexts, answer = [[2, 20, 21], [2, 22, 23]], list(range(60, 70))
    for _ in range(5):
        turn = engine.generate(caches, [0, 1], contexts, params, generator)
        contexts = [c + turn.completion_ids[i].tolist() + answer for i, c in enumerate(contexts)]
    assert layouts == [3 + 4 + 2 * (3 + 4), 20 + 11 + 4 + 2 * (11 + 4)]
