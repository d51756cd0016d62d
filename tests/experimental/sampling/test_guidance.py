"""Guidance rules (SAGE [69], AdaPrefix-GRPO [77], Scaf-GRPO [250]) and reference insertion (GCPO [253], EDGE-GRPO's
guided error correction [99]): hand-computed controller and stagnation updates, the guidance they attach, the samples
they insert and replace, state round trips; then two steps of training on the chain demo with GCPO and AdaPrefix,
whose evaluation prompts carry no guidance."""

from __future__ import annotations

import json
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest
import torch

from genalign.config import from_dict
from genalign.config.schema import TrainConfig
from genalign.experimental.sampling.guidance import attach, reference_prefix
from genalign.policies.base import GUIDANCE_KEY
from genalign.policies.lm.causal import CausalLMPolicy
from genalign.sampling import SAMPLE_SOURCES, Candidate, Outcome
from genalign.trainer import recipe

SOLUTION = "37+45=82\n82-18=64\nA:64"
GEN = torch.Generator()


def outcome(groups: dict[int, list[float]], *, forced: dict[int, list[float]] | None = None, progress=0.1, step=1,
            lengths: dict[int, list[int]] | None = None, tokens=None) -> Outcome:  # fmt: skip
    """Samples of prompts at stream position p (data index p + 100) with the given rewards; ``forced`` are added
    after them, flagged."""
    positions, rewards, flags, lens = [], [], [], []
    for part, flag in ((groups, False), (forced or {}, True)):
        for position, values in part.items():
            positions += [position] * len(values)
            rewards += values
            flags += [flag] * len(values)
            lens += (lengths or {}).get(position, [3] * len(values)) if not flag else [5] * len(values)
    n = len(positions)
    return Outcome(
        positions=torch.tensor(positions), indices=torch.tensor(positions) + 100,
        rewards=torch.tensor(rewards, dtype=torch.float64), lengths=torch.tensor(lens, dtype=torch.float64),
        truncated=None, progress=progress, forced=torch.tensor(flags), tokens=tokens,
        behaviour_logp=None if tokens is None else torch.zeros(n, tokens.shape[1]), step=step,
    )  # fmt: skip


def candidates(*positions: int, **columns) -> list[Candidate]:
    return [Candidate(p, p + 100, {"prompt": f"q{p}", "solution": SOLUTION, **columns}) for p in positions]


def guidance_of(chosen: list[Candidate]) -> list[dict | None]:
    return [c.row.get(GUIDANCE_KEY) for c in chosen]


def round_trip(rule, name: str, **args):
    fresh = SAMPLE_SOURCES.get(name)(**args)
    fresh.load_state_dict(json.loads(json.dumps(rule.state_dict())))
    assert fresh.state_dict() == rule.state_dict()
    return fresh


def test_attach_copies_the_row_and_appends_hints():
    original = candidates(1)[0]
    once = attach(original, hint=" a", prefix="x")
    twice = attach(once, hint=" b", prefix="y")
    assert GUIDANCE_KEY not in original.row and once.row[GUIDANCE_KEY] == {"hint": " a", "prefix": "x"}
    assert twice.row[GUIDANCE_KEY] == {"hint": " a b", "prefix": "y"} and twice.position == 1 and twice.index == 101


def test_reference_prefix_takes_the_first_ceil_f_l_words_or_characters():
    assert reference_prefix(SOLUTION, 0.5, "words") == "37+45=82\n82-18=64"  # ⌈0.5·3⌉ = 2 of 3 words
    assert reference_prefix(SOLUTION, 0.1, "words") == "37+45=82"  # ⌈0.3⌉ = 1
    assert reference_prefix(SOLUTION, 1.0, "words") == SOLUTION
    assert reference_prefix("abcdef", 0.34, "chars") == "abc"  # ⌈2.04⌉ = 3
    assert reference_prefix("abcdef", 0.0, "chars") == "" and reference_prefix("  ", 0.5, "words") == ""


def test_adaprefix_controller_raises_after_failure_lowers_after_success_and_withdraws():
    rule = SAMPLE_SOURCES.get("adaprefix")(init=0.5, gain=0.5, withdraw_start=0.6, withdraw_end=0.8)
    chosen = rule.choose(candidates(1, 2), 2, GEN)
    assert guidance_of(chosen) == [{"prefix": "37+45=82\n82-18=64"}] * 2  # f = 0.5 → 2 of 3 words
    decision = rule.after_rewards(outcome({1: [0.0, 0.0, 0.0, 0.0], 2: [1.0, 1.0, 1.0, 0.0]}, progress=0.1, step=1))
    assert rule.fractions == {101: 0.75, 102: 0.375}  # 0.5 + 0.5·(0.5 − 0) ; 0.5 + 0.5·(0.5 − 0.75)
    assert decision.stats["prefixed"] == 2 and decision.stats["fraction_mean"] == 0.5
    assert decision.stats["success_rate"] == 0.375
    rule = round_trip(rule, "adaprefix", init=0.5, gain=0.5, withdraw_start=0.6, withdraw_end=0.8)
    assert rule.cap() == 1.0  # estimated progress 0.2
    chosen = rule.choose(candidates(1, 2), 2, GEN)
    assert guidance_of(chosen) == [{"prefix": SOLUTION}, {"prefix": "37+45=82\n82-18=64"}]  # ⌈2.25⌉=3, ⌈1.125⌉=2
    rule.after_rewards(outcome({1: [1.0, 1.0]}, progress=0.6, step=6))
    assert rule.fractions[101] == 0.5  # from the applied 0.75: 0.75 + 0.5·(0.5 − 1)
    assert rule.cap() == pytest.approx(0.5)  # estimated progress 0.7: (0.8 − 0.7) / (0.8 − 0.6)
    rule.after_rewards(outcome({3: [0.0]}, progress=0.7, step=7))
    assert rule.cap() == 0.0 and guidance_of(rule.choose(candidates(1, 2), 2, GEN)) == [None, None]


def test_sage_hints_only_prompts_whose_last_group_failed_with_the_reference_in_the_instruction():
    rule = SAMPLE_SOURCES.get("sage")(instruction=" ref: {solution} hint:", hint_tokens=16, template=" h: {hint}")
    assert guidance_of(rule.choose(candidates(1, 2), 2, GEN)) == [None, None]  # first visits are unaided
    rule.after_rewards(outcome({1: [0.0, 0.0], 2: [1.0, 0.0]}))
    rule = round_trip(rule, "sage")
    rule.instruction, rule.hint_tokens, rule.template = " ref: {solution} hint:", 16, " h: {hint}"
    guided = guidance_of(rule.choose(candidates(1, 2), 2, GEN))
    expected = {"self_hint": f" ref: {SOLUTION} hint:", "self_hint_tokens": 16, "self_hint_template": " h: {hint}"}
    assert guided == [expected, None]
    decision = rule.after_rewards(outcome({1: [1.0, 0.0], 2: [0.0, 0.0]}))
    assert decision.stats["hinted"] == 1 and decision.stats["hinted_success"] == 0.5
    assert [g is not None for g in guidance_of(rule.choose(candidates(1, 2), 2, GEN))] == [False, True]
    everyone = SAMPLE_SOURCES.get("sage")(only_failed=False)
    assert all(g is not None for g in guidance_of(everyone.choose(candidates(1, 2), 2, GEN)))
    with pytest.raises(ValueError, match="'answer'"):
        SAMPLE_SOURCES.get("sage")(only_failed=False, solution_column="answer").choose(candidates(1), 1, GEN)


def test_scaf_escalates_tiers_only_while_stagnation_persists():
    rows = candidates(1, hints=["abstract", "concrete", "steps"])
    rule = SAMPLE_SOURCES.get("scaf")(patience=2, template=" hint {hint}", start_progress=0.2)
    rule.after_rewards(outcome({1: [0.0, 0.0]}, progress=0.1))  # guidance-exempt warm-up: not counted
    assert rule.stuck == {} and guidance_of(rule.choose(rows, 1, GEN)) == [None]
    rule.after_rewards(outcome({1: [0.0, 0.0]}, progress=0.3))
    decision = rule.after_rewards(outcome({1: [0.0, 0.0]}, progress=0.4))
    assert rule.tier == {101: 1} and decision.stats["escalated"] == 1
    assert guidance_of(rule.choose(rows, 1, GEN)) == [{"hint": " hint abstract"}]
    rule = round_trip(rule, "scaf")
    rule.template = " hint {hint}"
    rule.after_rewards(outcome({1: [0.0, 0.0]}, progress=0.5))
    rule.after_rewards(outcome({1: [1.0, 0.0]}, progress=0.6))  # a success resets the count and keeps the tier
    rule.after_rewards(outcome({1: [0.0, 0.0]}, progress=0.7))
    assert rule.tier == {101: 1} and rule.stuck == {101: 1}
    rule.after_rewards(outcome({1: [0.0, 0.0]}, progress=0.8))
    assert rule.tier == {101: 2} and guidance_of(rule.choose(rows, 1, GEN)) == [{"hint": " hint concrete"}]
    by_column = SAMPLE_SOURCES.get("scaf")(hints=["h1", "h2"], patience=1, template="{hint}")
    by_column.after_rewards(outcome({1: [0.0]}))
    assert guidance_of(by_column.choose(candidates(1, h1="x", h2="y"), 1, GEN)) == [{"hint": "x"}]
    with pytest.raises(ValueError, match="'h2'"):
        by_column.choose(candidates(1, h1="x"), 1, GEN)


def test_gcpo_inserts_the_reference_into_all_wrong_groups_in_place_of_the_last_wrong_sample():
    rule = SAMPLE_SOURCES.get("gcpo")()
    assert rule.forces and rule.choose(candidates(1, 2), 2, GEN) == candidates(1, 2)
    drawn = outcome({1: [0.0, 0.2, 0.0], 2: [1.0, 0.0, 0.0]})
    forced = rule.forced_samples(drawn)
    assert [(f.position, f.kind, f.text, f.tokens) for f in forced] == [(1, "reference", SOLUTION, None)]
    decision = rule.after_rewards(outcome({1: [0.0, 0.2, 0.0], 2: [1.0, 0.0, 0.0]}, forced={1: [1.0]}))
    assert decision.keep.tolist() == [True, True, False, True, True, True, True]
    assert decision.stats == {"inserted": 1.0, "inserted_success": 1.0, "all_wrong_without_reference": 0.0}
    empty = SAMPLE_SOURCES.get("gcpo")()
    empty.choose([Candidate(1, 101, {"prompt": "q", "solution": ""})], 1, GEN)
    assert empty.forced_samples(drawn) == []


def test_edge_gec_corrects_the_shortest_wrong_response_with_a_cue_and_the_reference():
    tokenizer = chain_tokenizer()
    texts = ["37+45=81\n81-18=63\nA:63", "37+45=81\nA:81"]
    ids = [tokenizer(t, add_special_tokens=False)["input_ids"] for t in texts]
    width = max(len(i) for i in ids)
    tokens = torch.tensor([i + [0] * (width - len(i)) for i in ids])
    rule = SAMPLE_SOURCES.get("edge_gec")(tokenizer="builtin:chain-lm", cue="\nWait:\n")
    assert rule.needs_tokens and SAMPLE_SOURCES.meta("edge_gec")["needs"] == ("action_ids",)
    rule.choose(candidates(4), 1, GEN)
    drawn = outcome({4: [0.0, 0.0]}, lengths={4: [len(i) for i in ids]}, tokens=tokens)
    (forced,) = rule.forced_samples(drawn)
    assert forced.kind == "correction" and forced.text == tokenizer.decode(ids[1]) + "\nWait:\n" + SOLUTION
    after = outcome({4: [0.0, 0.0]}, forced={4: [1.0]}, lengths={4: [len(i) for i in ids]}, tokens=None)
    assert rule.after_rewards(after).keep.tolist() == [True, False, True]


def chain_config(tmp_path, rule: str, args: dict) -> TrainConfig:
    return from_dict(TrainConfig, {
        "policy": {"family": "causal_lm", "model": "builtin:chain-lm", "max_prompt_tokens": 96, "max_new_tokens": 64,
                   "engine": "static"},
        "data": {"train": {"source": "procedural:arithmetic_chain", "args": {"size": 64, "seed": 0, "split": "train"}},
                 "eval": {"source": "procedural:arithmetic_chain", "args": {"size": 8, "seed": 1, "split": "eval"}}},
        "rewards": [{"fn": "chain_answer", "name": "accuracy"}],
        "algorithm": {"group_size": 4, "prompts_per_step": 4, "micro_batch_size": 32, "kl_coef": 0.0,
                      "sample_sources": [{"name": rule, **args}]},
        "optim": {"lr": 1.0e-4},
        "eval": {"at_start": False, "every": 0, "num_prompts": 4, "batch_size": 4},
        "run": {"output_dir": str(tmp_path / "run"), "max_steps": 2, "progress_bar": False, "overwrite": True,
                "save_every": 0, "num_threads": 1},
    })  # fmt: skip


def spy_rollouts(monkeypatch) -> list[tuple[str, list[dict], torch.Tensor, torch.Tensor]]:
    calls = []
    real = CausalLMPolicy.rollout

    def spy(self, rows, group_size, *, mode="train", request=None, **kwargs):
        kwargs = {"request": request} if request is not None else {}
        rollout = real(self, rows, group_size, mode=mode, **kwargs)
        calls.append((mode, list(rows), rollout.per_sample["prompt_ids"], rollout.per_sample["prompt_mask"]))
        return rollout

    monkeypatch.setattr(CausalLMPolicy, "rollout", spy)
    return calls


def test_gcpo_training_inserts_reference_solutions(tmp_path, monkeypatch):
    calls = spy_rollouts(monkeypatch)
    recipe.train(chain_config(tmp_path, "gcpo", {"threshold": 2.0}))  # nothing reaches 2: every group is all wrong
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["sampling/forced_reference"] for r in records] == [4.0, 4.0]
    assert [r["sampling/gcpo/inserted"] for r in records] == [4.0, 4.0]
    # one wrong sample of each group replaced: 16 of the 20 samples form the groups
    assert all(r["num_samples"] == 16 and r["sampling/frac_kept"] == pytest.approx(16 / 20) for r in records)
    assert [mode for mode, *_ in calls] == ["train", "train", "eval"]


def test_adaprefix_training_guides_train_prompts_but_never_evaluation(tmp_path, monkeypatch):
    calls = spy_rollouts(monkeypatch)
    recipe.train(chain_config(tmp_path, "adaprefix", {"init": 0.5, "unit": "chars", "withdraw_end": 0.9}))
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    # step 1: every prompt starts with half its reference; step 2 (progress 1.0 > withdraw_end): help withdrawn
    assert [r["sampling/adaprefix/prefixed"] for r in records] == [4.0, 0.0]
    assert [r["sampling/adaprefix/fraction_mean"] for r in records] == [0.5, 0.0]
    train = [c for c in calls if c[0] == "train"]
    evals = [c for c in calls if c[0] == "eval"]
    assert len(train) == 2 and len(evals) == 1
    half = [row["solution"][: -(-len(row["solution"]) // 2)] for row in train[0][1]]  # ⌈0.5·L⌉ characters
    assert [row[GUIDANCE_KEY]["prefix"] for row in train[0][1]] == half
    assert all(GUIDANCE_KEY not in row for row in train[1][1])
    tokenizer = chain_tokenizer()
    for _, rows, ids, mask in evals:  # the rendered evaluation prompts are the plain prompts of the data
        assert all(GUIDANCE_KEY not in row for row in rows)
        for row, prompt_ids, prompt_mask in zip(rows, ids, mask, strict=True):
            assert prompt_ids[prompt_mask > 0].tolist() == tokenizer(row["prompt"])["input_ids"]


def chain_tokenizer():
    from genalign.assets import model_location
    from genalign.policies.lm.tokenizer import load_tokenizer

    return load_tokenizer(model_location("builtin:chain-lm"))
