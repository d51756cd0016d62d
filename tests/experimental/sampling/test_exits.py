"""Early exits from a sampled reasoning path (S-GRPO's serial groups [14], Step-GRPO's dynamic truncation [114]) on
the chain demo's character tokenizer: where a path may be cut, the forced continuations that exit it (the path's
tokens and behaviour log-probs, the cue scored by the current policy), the exit order the rule reports for the
``exit_decay`` shaper, the truncation after the first confident step; then one training step on the chain demo in
which the serial group reaches the update with its decayed rewards."""

from __future__ import annotations

import json
import math
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest
import torch

from genalign.config import from_dict
from genalign.config.schema import TrainConfig
from genalign.experimental.sampling.exits import DynamicTruncation, SerialExits
from genalign.experimental.sampling.tokens import PolicyTokens
from genalign.sampling import Outcome
from genalign.trainer import recipe

TOKENS = PolicyTokens("builtin:chain-lm", "test")
EOS = 1
PATH = "10+20=30\n30+5=35\n35-1=34\nA:34"  # steps end at tokens 8, 16 and 24; the answer marker starts at 25


def ids(text: str, end: bool = True) -> torch.Tensor:
    return torch.tensor(TOKENS.encode(text) + ([EOS] if end else []))


def outcome(samples: list[tuple[int, torch.Tensor, torch.Tensor, bool]], rewards=None, step: int = 3) -> Outcome:
    """Samples ``(position, tokens [T_i], behaviour log-probs [T_i], forced)`` of prompts at data index position+100."""
    width = max(t.shape[0] for _, t, _, _ in samples)
    tokens = torch.zeros(len(samples), width, dtype=torch.long)
    logp = torch.zeros(len(samples), width)
    for i, (_, t, lp, _) in enumerate(samples):
        tokens[i, : t.shape[0]], logp[i, : t.shape[0]] = t, lp
    positions = torch.tensor([p for p, *_ in samples])
    return Outcome(
        positions=positions, indices=positions + 100,
        rewards=torch.tensor(rewards if rewards is not None else [1.0] * len(samples), dtype=torch.float64),
        lengths=torch.tensor([float(t.shape[0]) for _, t, _, _ in samples]), truncated=None, progress=0.3,
        forced=torch.tensor([f for *_, f in samples]), tokens=tokens, behaviour_logp=logp, step=step,
    )  # fmt: skip


def test_a_path_is_cut_only_after_steps_inside_its_reasoning():
    rule = SerialExits(tokenizer="builtin:chain-lm", cue="A:", answer_marker="A:")
    path = ids(PATH)
    assert rule.reasoning_length(path) == 25
    assert rule.step_cuts(path) == [9, 17]  # after steps 1 and 2; after step 3 the path answers anyway
    whole = SerialExits(tokenizer="builtin:chain-lm", cue="A:", answer_marker=None)
    assert whole.step_cuts(path) == [9, 17, 25]  # without a marker every step end but the path's last token
    tokens = SerialExits(tokenizer="builtin:chain-lm", cue="A:", answer_marker="A:", at="tokens", exits=30)
    tokens.samples_per_prompt(4)
    assert tokens.cuts(outcome([(0, path, torch.zeros(30), False)]), 0) == list(range(1, 25))


def test_serial_exits_force_the_answer_at_each_exit_and_report_the_exit_order():
    rule = SerialExits(tokenizer="builtin:chain-lm", cue="A:", answer_marker="A:")
    assert rule.samples_per_prompt(3) == 1 and rule.exits == 2  # a serial group of group_size = 3 members
    path, logp = ids(PATH), -torch.arange(1, 31).float() / 100
    drawn = outcome([(0, path, logp, False)])
    forced = rule.forced_samples(drawn)
    cue = TOKENS.encode("A:")
    assert [(f.position, f.kind, f.continues) for f in forced] == [(0, "exit", True)] * 2
    for item, cut in zip(forced, [9, 17], strict=True):
        assert item.tokens.tolist() == path[:cut].tolist() + cue
        assert item.behaviour_logp[:cut].tolist() == logp[:cut].tolist()
        assert item.behaviour_logp[cut:].isnan().all() and item.behaviour_logp.shape[0] == cut + 2
    # after the rewards: the members (continued starts), a forced sample of another rule, another prompt's sample
    late = torch.cat([forced[1].tokens, ids("35")])
    early = torch.cat([forced[0].tokens, ids("30")])
    stranger = ids("A:1")
    after = outcome([(0, path, logp, False), (1, ids("A:5"), torch.zeros(4), False), (0, early, torch.zeros(14), True),
                     (0, stranger, torch.zeros(4), True), (0, late, torch.zeros(22), True)])  # fmt: skip
    decision = rule.after_rewards(after)
    assert decision.signals["exit_order"].tolist() == [2, 0, 0, -1, 1]
    assert decision.keep.tolist() == [True, False, True, True, True]  # prompt 1's exit is missing: alone, dropped
    assert decision.stats["exits"] == 2.0 and decision.stats["paths_alone"] == 1.0
    # a path without a step exits before its reasoning: the cue, then the answer
    (before,) = rule.forced_samples(outcome([(1, ids("A:5"), torch.zeros(4), False)]))
    assert before.tokens.tolist() == cue and before.behaviour_logp.isnan().all()
    assert decision.stats["exit_fraction_mean"] == pytest.approx((9 / 30 + 17 / 30) / 2)


def test_fewer_exits_are_drawn_as_a_function_of_step_and_prompt():
    rule = SerialExits(tokenizer="builtin:chain-lm", cue="A:", answer_marker="A:", exits=1)
    path = ids(PATH)
    drawn = {step: rule.cuts(outcome([(0, path, torch.zeros(30), False)], step=step), 0) for step in range(12)}
    assert all(len(cuts) == 1 and cuts[0] in (9, 17) for cuts in drawn.values())
    assert {cuts[0] for cuts in drawn.values()} == {9, 17}  # both exits occur over the steps
    again = rule.cuts(outcome([(0, path, torch.zeros(30), False)], step=5), 0)
    assert again == drawn[5]


def step_logp(confidences: list[float]) -> torch.Tensor:
    """Behaviour log-probs of PATH whose three steps (9, 8 and 8 tokens) have these step confidences."""
    sizes = [9, 8, 8]
    parts = [torch.full((n,), math.log(c)) for n, c in zip(sizes, confidences, strict=True)]
    return torch.cat([*parts, torch.zeros(5)])  # the answer line and the end token


def test_dynamic_truncation_cuts_after_the_first_confident_step_inside_the_reasoning():
    rule = DynamicTruncation(tokenizer="builtin:chain-lm", cue="A:", answer_marker="A:", confidence=0.9)
    path = ids(PATH)
    assert rule.truncation(path, step_logp([0.5, 0.95, 0.99])) == 17  # step 2 is the first with c >= 0.9
    assert rule.truncation(path, step_logp([0.92, 0.95, 0.99])) == 9
    assert rule.truncation(path, step_logp([0.5, 0.5, 0.99])) is None  # step 3 is the last: no shorter path
    patient = DynamicTruncation(tokenizer="builtin:chain-lm", cue="A:", answer_marker="A:", confidence=0.9,
                                min_steps=2)  # fmt: skip
    assert patient.truncation(path, step_logp([0.92, 0.5, 0.99])) is None
    assert patient.truncation(path, step_logp([0.92, 0.95, 0.99])) == 17


def test_dynamic_truncation_adds_the_concise_paths_or_replaces_their_sources():
    path = ids(PATH)
    samples = [(0, path, step_logp([0.5, 0.95, 0.99]), False), (0, path, step_logp([0.5, 0.5, 0.5]), False),
               (1, path, step_logp([0.99, 0.5, 0.5]), False)]  # fmt: skip
    rule = DynamicTruncation(tokenizer="builtin:chain-lm", cue="A:", answer_marker="A:", confidence=0.9)
    forced = rule.forced_samples(outcome(samples))
    assert [(f.position, f.kind, f.continues, f.tokens.shape[0]) for f in forced] == [
        (0, "truncated", True, 17 + 2),
        (1, "truncated", True, 9 + 2),
    ]
    decision = rule.after_rewards(outcome(samples))
    assert decision.keep is None and decision.stats["truncated"] == 2.0
    assert decision.stats["kept_fraction_mean"] == pytest.approx((17 / 30 + 9 / 30) / 2)
    replacing = DynamicTruncation(tokenizer="builtin:chain-lm", cue="A:", answer_marker="A:", confidence=0.9,
                                  replace=True, per_prompt=1)  # fmt: skip
    assert replacing.after_rewards(outcome(samples)).keep.tolist() == [False, True, False]


def test_bad_arguments_name_the_field():
    with pytest.raises(ValueError, match="tokenizer = ''"):
        SerialExits(tokenizer="")
    with pytest.raises(ValueError, match="tokenizer = 'builtin:no-such-lm'"):
        SerialExits(tokenizer="builtin:no-such-lm")
    with pytest.raises(ValueError, match=r"confidence = 1\.5"):
        DynamicTruncation(tokenizer="builtin:chain-lm", confidence=1.5)
    with pytest.raises(ValueError, match="at = 'lines'"):
        SerialExits(tokenizer="builtin:chain-lm", at="lines")


def always_right(prompts, completions, **columns) -> list[float]:
    """Every completion is right: the decaying reward alone separates the members of a serial group."""
    return [1.0] * len(completions)


def test_a_serial_group_trains_with_decaying_rewards(tmp_path, monkeypatch):
    seen = {}
    real = recipe.run_update

    def spy(policy, rollout, batch, *args, **kwargs):
        seen.update(rollout=rollout, batch=batch)
        return real(policy, rollout, batch, *args, **kwargs)

    monkeypatch.setattr(recipe, "run_update", spy)
    config = from_dict(TrainConfig, {
        "policy": {"family": "causal_lm", "model": "builtin:chain-lm", "max_prompt_tokens": 32, "max_new_tokens": 40},
        "data": {"train": {"source": "procedural:arithmetic_chain", "args": {"size": 8, "seed": 0, "steps": 3}}},
        "rewards": [{"fn": "tests.experimental.sampling.test_exits:always_right", "name": "right"}],
        "algorithm": {"group_size": 3, "prompts_per_step": 2, "micro_batch_size": 16, "advantage": "dr_grpo",
                      "sample_sources": [{"name": "serial_exits", "tokenizer": "builtin:chain-lm", "cue": "A:",
                                          "answer_marker": "A:"}],
                      "reward_shaping": ["exit_decay"]},
        "eval": {"at_start": False, "every": 0},
        "run": {"output_dir": str(tmp_path / "run"), "max_steps": 1, "progress_bar": False, "num_threads": 1},
    })  # fmt: skip
    recipe.train(config)
    rollout, batch = seen["rollout"], seen["batch"]
    order = rollout.structure["exit_order"]  # [N]
    record = json.loads((tmp_path / "run" / "metrics.jsonl").read_text().splitlines()[0])
    assert record["sampling/forced_exit"] == record["sampling/serial_exits/exits"] == float((order >= 0).sum() - 2)
    assert record["sampling/forced_exit"] > 0, "the chain demo's paths have steps to exit after"
    for group in rollout.group_ids.unique():
        members = (rollout.group_ids == group).nonzero().flatten()
        ranks = order[members]
        assert sorted(ranks.tolist()) == list(range(len(members)))  # the path and its exits, each once
        # every member is right: the k-th exit keeps 0.5^k of its reward, the full path exits last
        assert batch["combined_reward"][members].tolist() == [0.5 ** int(r) for r in ranks]
        path = members[ranks == len(members) - 1][0]
        cue = TOKENS.encode("A:")
        for member in members[ranks < len(members) - 1]:
            length = int(rollout.action_mask[member].sum())
            start = rollout.structure["action_ids"][member, :length].tolist()
            cut = next(t for t in range(length) if start[t : t + 2] == cue)
            assert start[:cut] == rollout.structure["action_ids"][path, :cut].tolist()
            assert rollout.old_logp[member, :cut].tolist() == rollout.old_logp[path, :cut].tolist()
