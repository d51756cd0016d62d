"""Guidance rendering for the causal-LM family: hints in the user prompt, forced completion prefixes as conditioning
(never actions, no gradient), one engine call per row temperature, self-hints sampled by the policy ([69] SAGE), bad
guidance rejected, and reward functions that never see the guidance key."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest
import torch

from genalign.config.schema import AlgorithmConfig, RewardSpec
from genalign.policies.base import GUIDANCE_KEY, Rollout
from genalign.policies.lm.causal import CausalLMPolicyConfig, build_policy
from genalign.policies.lm.logprobs import completion_scores
from genalign.policies.lm.reference import get_base_model
from genalign.policies.lm.tiny import build_tiny_causal_lm
from genalign.rewards import REWARDS
from genalign.trainer.rewards import RewardSet
from genalign.trainer.step_batch import rollout_batch

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return build_tiny_causal_lm(tmp_path_factory.mktemp("models") / "qwen2", vocab_size=96)


def make_policy(model_dir, **overrides):
    config = CausalLMPolicyConfig(model=str(model_dir), max_new_tokens=6, temperature=1.0)
    for key, value in overrides.items():
        setattr(config, key, value)
    return build_policy(config, "cpu")


def ids_of(policy, text: str) -> list[int]:
    return policy.tokenizer(text, add_special_tokens=False)["input_ids"]


def real(ids: torch.Tensor, mask: torch.Tensor) -> list[int]:
    return ids[mask > 0].tolist()


def test_hint_is_added_to_the_prompt_and_prefix_follows_it(model_dir):
    policy = make_policy(model_dir)
    rows = [{"prompt": "1 + 2 =", GUIDANCE_KEY: {"hint": " the answer is", "prefix": "3 ."}}, {"prompt": "a b"}]
    rollout = policy.rollout(rows, 2)
    data = rollout.per_sample
    assert real(data["prompt_ids"][0], data["prompt_mask"][0]) == ids_of(policy, "1 + 2 = the answer is 3 .")
    assert real(data["prompt_ids"][2], data["prompt_mask"][2]) == ids_of(policy, "a b")
    for i in (0, 1):  # the reward functions read the whole solution: prefix, then the sampled continuation
        n = int(rollout.action_mask[i].sum())
        continuation = policy.tokenizer.decode(data["completion_ids"][i, :n].tolist(), skip_special_tokens=True)
        assert rollout.outputs[i] == ("3 . " + continuation).strip()


def test_max_prompt_tokens_limits_the_data_prompt_and_guidance_comes_on_top(model_dir):
    """A sample source's hint and prefix (e.g. AdaPrefix's growing reference prefix) do not count against
    policy.max_prompt_tokens; truncate_left cuts the data's prompt and keeps the guidance whole."""
    base = len(ids_of(make_policy(model_dir), "1 + 2 ="))
    guided = {"prompt": "1 + 2 =", GUIDANCE_KEY: {"hint": " the answer is", "prefix": "3 ."}}
    policy = make_policy(model_dir, max_prompt_tokens=base)
    data = policy.rollout([guided], 1).per_sample
    assert real(data["prompt_ids"][0], data["prompt_mask"][0]) == ids_of(policy, "1 + 2 = the answer is 3 .")
    short = make_policy(model_dir, max_prompt_tokens=base - 1)
    with pytest.raises(ValueError, match=rf"prompt has {base} tokens, more than policy.max_prompt_tokens={base - 1}"):
        short.rollout([guided], 1)
    cut = make_policy(model_dir, max_prompt_tokens=base - 1, on_long_prompt="truncate_left")
    data = cut.rollout([guided], 1).per_sample
    assert real(data["prompt_ids"][0], data["prompt_mask"][0]) == ids_of(policy, "1 + 2 = the answer is 3 .")[1:]


def test_hint_goes_into_the_last_user_message_before_the_chat_template(model_dir):
    policy = make_policy(model_dir, use_chat_template=True)
    messages = [
        {"role": "user", "content": "1 + 2"},
        {"role": "assistant", "content": "4"},
        {"role": "user", "content": "a"},
    ]
    prompts = policy.encode([{"prompt": messages, GUIDANCE_KEY: {"hint": " b", "prefix": "c"}}])
    text = policy.tokenizer.apply_chat_template(
        [*messages[:2], {"role": "user", "content": "a b"}], add_generation_prompt=True, tokenize=False
    )
    assert real(prompts.ids[0], prompts.mask[0]) == ids_of(policy, text) + ids_of(policy, "c")
    assert prompts.prefixes == [ids_of(policy, "c")]


def test_rows_are_sampled_once_per_temperature_with_behaviour_logp_at_it(model_dir, monkeypatch):
    policy = make_policy(model_dir, temperature=1.0)
    calls = []
    real_generate = policy.engine.generate

    def spy(ids, mask, params, generator):
        calls.append((ids.shape[0], params.temperature))
        return real_generate(ids, mask, params, generator)

    monkeypatch.setattr(policy.engine, "generate", spy)
    rows = [
        {"prompt": "1 + 2 =", GUIDANCE_KEY: {"temperature": 0.5}},
        {"prompt": "a b"},
        {"prompt": "c", GUIDANCE_KEY: {"temperature": 0.5}},
    ]
    rollout = policy.rollout(rows, 2)
    assert calls == [(4, 0.5), (2, 1.0)]
    assert [row["prompt"] for row in rollout.rows] == ["1 + 2 =", "1 + 2 =", "a b", "a b", "c", "c"]
    data = rollout.per_sample
    for temperature, samples in ((0.5, [0, 1, 4, 5]), (1.0, [2, 3])):
        pick = torch.tensor(samples)
        with torch.no_grad():
            at_t = completion_scores(
                policy.model, data["prompt_ids"][pick], data["prompt_mask"][pick], data["completion_ids"][pick],
                data["completion_mask"][pick], temperature=temperature, chunk_size=256,
            ).logp  # fmt: skip
        assert (at_t - rollout.old_logp[pick][:, : at_t.shape[1]]).abs().max() < 1e-4


def test_one_guided_temperature_samples_what_a_policy_at_that_temperature_samples(model_dir):
    rows = [{"prompt": "1 + 2 ="}, {"prompt": "a b"}]
    guided = make_policy(model_dir, temperature=1.0).rollout(
        [{**r, GUIDANCE_KEY: {"temperature": 0.3}} for r in rows], 3
    )
    plain = make_policy(model_dir, temperature=0.3).rollout(rows, 3)
    assert torch.equal(guided.per_sample["completion_ids"], plain.per_sample["completion_ids"])
    assert torch.equal(guided.old_logp, plain.old_logp)


def test_self_hint_is_sampled_under_the_instruction_then_rendered_like_a_hint(model_dir, monkeypatch):
    policy = make_policy(model_dir)
    calls = []
    real_generate = policy.engine.generate

    def spy(ids, mask, params, generator):
        calls.append((real(ids[0], mask[0]), params.max_new_tokens))
        return real_generate(ids, mask, params, generator)

    monkeypatch.setattr(policy.engine, "generate", spy)
    guidance = {"self_hint": " what is the answer ?", "self_hint_tokens": 3, "self_hint_template": " hint : {hint} ;"}
    rollout = policy.rollout([{"prompt": "1 + 2 =", GUIDANCE_KEY: guidance}], 2)
    assert calls[0] == (ids_of(policy, "1 + 2 = what is the answer ?"), 3)
    assert calls[1][1] == 6 and len(calls) == 2
    resolved = rollout.rows[0][GUIDANCE_KEY]
    assert set(resolved) == {"hint"} and resolved["hint"].startswith(" hint : ") and resolved["hint"].endswith(" ;")
    assert rollout.counts["self_hints"] == 1 and 1 <= rollout.counts["self_hint_tokens"] <= 3
    prompt = policy.encode(rollout.rows[:1])  # the stored row renders the prompt the completions were sampled under
    assert real(prompt.ids[0], prompt.mask[0]) == real(
        rollout.per_sample["prompt_ids"][0], rollout.per_sample["prompt_mask"][0]
    )
    assert calls[1][0] == real(prompt.ids[0], prompt.mask[0])


@pytest.mark.parametrize(
    ("guidance", "match"),
    [({"hnit": "x"}, "unknown guidance key"), ({"temperature": 0}, "temperature"), ({"hint": 3}, "hint"),
     ({"self_hint": "x", "self_hint_template": "no field"}, "self_hint_template"), ("x", "dict")],
)  # fmt: skip
def test_bad_guidance_is_rejected_naming_the_key(model_dir, guidance, match):
    with pytest.raises(ValueError, match=match):
        make_policy(model_dir).rollout([{"prompt": "a", GUIDANCE_KEY: guidance}], 1)


def test_reward_functions_never_see_the_guidance_key():
    seen = {}

    @REWARDS.register("spy_columns_guidance_test")
    class Spy:
        def __call__(self, prompts, completions, **columns):
            seen.update(columns)
            return [1.0] * len(completions)

    rewards = RewardSet([RewardSpec(fn="spy_columns_guidance_test")])
    rewards([{"prompt": "a", "answer": "1", GUIDANCE_KEY: {"hint": "b"}}], ["x"])
    assert "answer" in seen and GUIDANCE_KEY not in seen


def _loss(policy, rollout: Rollout, advantages: torch.Tensor) -> torch.Tensor:
    plan = AlgorithmConfig().loss_plan()
    batch = rollout_batch(rollout, torch.zeros(len(rollout), 1), 0.0).with_values(
        advantages=advantages, old_logp=rollout.old_logp
    )
    score = policy.score(rollout, plan.score_request(policy.capabilities.signals))
    return plan(score, batch, plan.normalizer(rollout.action_mask, advantages))[0]


def test_hint_and_prefix_tokens_get_no_loss_and_no_gradient(model_dir):
    policy = make_policy(model_dir)
    hint, prefix = " the answer is", "3 ."
    guided = policy.rollout([{"prompt": "1 + 2 =", GUIDANCE_KEY: {"hint": hint, "prefix": prefix}}], 4)
    data = guided.per_sample
    hint_ids, prefix_ids = ids_of(policy, hint), ids_of(policy, prefix)
    for i in range(len(guided)):  # (i) the actions are the sampled continuation only
        n = int(guided.action_mask[i].sum())
        assert torch.equal(guided.structure.get("action_ids")[i, :n], data["completion_ids"][i, :n])
        assert (
            real(data["prompt_ids"][i], data["prompt_mask"][i])[-len(hint_ids) - len(prefix_ids) :]
            == hint_ids + prefix_ids
        )
    # the loss equals that of the same actions after a plain prompt holding the hint and prefix text
    plain_rows = [{"prompt": "1 + 2 =" + hint + " " + prefix}] * len(guided)
    lengths = guided.action_mask.sum(1).long().tolist()
    actions = [ids[:n] for ids, n in zip(data["completion_ids"], lengths, strict=True)]
    behaviour = [logp[:n] for logp, n in zip(guided.old_logp, lengths, strict=True)]
    plain = policy.force(plain_rows, actions, behaviour)
    plain.group_ids = guided.group_ids
    assert torch.equal(plain.per_sample["prompt_ids"], data["prompt_ids"])
    advantages = torch.tensor([1.0, -0.5, 0.25, -0.75])
    captured = []
    backbone = get_base_model(policy.model).base_model
    handle = backbone.register_forward_hook(
        lambda _m, _a, out: captured.append(out.last_hidden_state) or out.last_hidden_state.retain_grad()
    )
    try:
        loss = _loss(policy, guided, advantages)
        loss.backward()
        plain_loss = _loss(policy, plain, advantages)
    finally:
        handle.remove()
    assert torch.equal(loss.detach(), plain_loss.detach())
    # (ii) the hidden states that the head turns into logits predicting prompt tokens (the hint and prefix among
    # them) receive exactly zero gradient; those predicting actions receive some
    grad = captured[0].grad  # [B, P + C, H]
    width = int(data["prompt_mask"].any(0).long().argmax())
    prompt_len = data["prompt_ids"].shape[1] - width
    assert torch.all(grad[:, : prompt_len - 1] == 0)
    assert grad[:, prompt_len - 1].abs().sum(-1).gt(0).all()
    hint_start = prompt_len - len(hint_ids) - len(prefix_ids)
    assert hint_start > 0 and torch.all(grad[:, hint_start - 1 : prompt_len - 1] == 0)


def test_engine_calls_per_temperature_merge_back_in_prompt_order():
    from genalign.algorithms.structure import PrefixTree
    from genalign.policies.lm.engines.base import Generation
    from genalign.policies.lm.guidance import merge_generations, merge_trees, split_by

    assert split_by([0.5, 1.0, 0.5]) == [(0.5, [0, 2]), (1.0, [1])]
    first = Generation(
        torch.tensor([[5, 6], [7, 0], [8, 9], [4, 0]]),
        torch.tensor([[1.0, 1], [1, 0], [1, 1], [1, 0]]),
        torch.full((4, 2), -1.0),
        torch.tensor([True, False, True, False]),
    )  # prompts 0 and 2, G = 2
    second = Generation(
        torch.tensor([[3], [2]]), torch.ones(2, 1), torch.full((2, 1), -2.0), torch.tensor([False, True])
    )
    merged = merge_generations([([0, 2], first), ([1], second)], 2, pad_token_id=0)
    assert merged.completion_ids.tolist() == [[5, 6], [7, 0], [3, 0], [2, 0], [8, 9], [4, 0]]
    assert merged.completion_mask.tolist() == [[1, 1], [1, 0], [1, 0], [1, 0], [1, 1], [1, 0]]
    assert merged.logp[:, 0].tolist() == [-1, -1, -2, -2, -1, -1] and merged.logp[2, 1] == 0
    assert merged.truncated.tolist() == [True, False, False, True, True, False]
    trees = merge_trees([([0, 2], PrefixTree(torch.tensor([[0, 1], [0, 2], [3, 4], [3, 5]]), torch.ones(4, 2).long())),
                         ([1], PrefixTree(torch.tensor([[0], [1]]), torch.zeros(2, 1).long()))], 2)  # fmt: skip
    assert trees.node_of_action.tolist() == [[0, 1], [0, 2], [6, 0], [7, 0], [3, 4], [3, 5]]  # second call offset by 6
