"""Shared-prefix tree rollouts (genalign.policies.lm.engines.tree): every leaf replays exactly through the ordinary static engine,
shared prefixes are sampled once, the sampling tree is declared as a PrefixTree, plans are validated."""

from __future__ import annotations

import copy
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest
import torch

from genalign.policies.lm.engines import SamplingParams
from genalign.policies.lm.engines.static import StaticCacheEngine
from genalign.policies.lm.engines.tree import LMTreePlan, TreeCacheEngine, sampling_entropy
from genalign.policies.lm.logprobs import completion_scores
from genalign.policies.lm.tiny import build_tiny_causal_lm

torch.set_num_threads(1)


@pytest.fixture(scope="module", params=["qwen2", "llama"])
def tiny(request, tmp_path_factory):
    from transformers import AutoModelForCausalLM

    from genalign.policies.lm.tokenizer import load_tokenizer

    path = build_tiny_causal_lm(tmp_path_factory.mktemp(request.param), architecture=request.param, vocab_size=96)
    model = AutoModelForCausalLM.from_pretrained(str(path)).eval()
    return model, load_tokenizer(str(path))


def with_eos_bias(model, eos: int, boost: float):
    model = copy.deepcopy(model)
    head = model.get_output_embeddings()
    bias = torch.zeros(head.out_features)
    bias[eos] = boost
    head.bias = torch.nn.Parameter(bias)
    return model


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
    base = {"max_new_tokens": 10, "eos_token_ids": (tokenizer.eos_token_id,), "pad_token_id": tokenizer.pad_token_id}
    return SamplingParams(**(base | overrides))


#: a stand-in segment-boundary table: every third token id of the tiny vocabulary ends a segment
BOUNDARIES = torch.arange(4096) % 3 == 0

PLANS = {
    "fixed": LMTreePlan(split_positions=(2, 4, 7), branching=(2, 3, 2)),
    "entropy": LMTreePlan(split_positions=(1, 3), branching=(4, 2), entropy_threshold=3.5, entropy_window=3),
    "segments": LMTreePlan(split_positions=(1, 3), branching=(4, 2), entropy_window=1, boundary_table=BOUNDARIES),
}


@pytest.mark.parametrize("plan_name", sorted(PLANS))
@pytest.mark.parametrize("eos_boost, top_k, top_p", [(0.0, 0, 1.0), (1.5, 8, 0.9)])
def test_every_leaf_equals_an_independent_rollout_replaying_its_draws(tiny, plan_name, eos_boost, top_k, top_p):
    model, tokenizer = tiny
    model = with_eos_bias(model, tokenizer.eos_token_id, eos_boost)
    plan = PLANS[plan_name]
    ids, mask = left_padded(tokenizer, ["1 + 2 =", "what is 3 * 4 ? answer :", "a b"])
    params = params_for(tokenizer, temperature=0.9, top_k=top_k, top_p=top_p)
    tree = TreeCacheEngine(model, tokenizer).generate_tree(ids, mask, params, torch.Generator().manual_seed(5), plan)
    leaves = plan.num_leaves
    out = tree.generation
    assert out.completion_ids.shape[0] == 3 * leaves
    # The ordinary engine, one independent row per leaf, consuming the leaf's recorded uniforms.
    replay = StaticCacheEngine(model, tokenizer).generate(
        ids.repeat_interleave(leaves, 0),
        mask.repeat_interleave(leaves, 0),
        params,
        torch.Generator().manual_seed(999),  # never used: every draw is replayed
        draws=tree.draws,
    )
    assert torch.equal(replay.completion_ids, out.completion_ids)
    assert torch.equal(replay.completion_mask, out.completion_mask)
    assert torch.equal(replay.truncated, out.truncated)
    assert (replay.logp - out.logp).abs().max().item() <= 1e-6
    # Distinct leaves: the tree branches (no leaf of a tree duplicates all others).
    assert len({tuple(row) for row in out.completion_ids.tolist()}) > 3
    if eos_boost > 0:
        lengths = out.completion_mask.sum(1)
        assert lengths.min() < lengths.max(), "the boost should end some leaves early"


def test_shared_prefix_tokens_are_generated_once_and_the_tree_is_declared(tiny):
    model, tokenizer = tiny
    plan = LMTreePlan(split_positions=(2, 4, 7), branching=(2, 3, 2))
    ids, mask = left_padded(tokenizer, ["1 + 2 =", "what is 3 * 4 ? answer :"])
    params = params_for(tokenizer, eos_token_ids=())  # every leaf runs all 10 tokens
    tree = TreeCacheEngine(model, tokenizer).generate_tree(ids, mask, params, torch.Generator().manual_seed(0), plan)
    ids_out, node, depth = tree.generation.completion_ids, tree.prefix_tree.node_of_action, tree.prefix_tree.depth
    # Hand count: 2 + 2·2 + 3·6 + 3·12 = 60 tokens per tree, 5 per leaf instead of 10.
    assert plan.tokens_per_leaf(10) == 60 / 12
    assert tree.generated_tokens == 2 * 60
    expected_depth = torch.tensor([0, 0, 1, 1, 2, 2, 2, 3, 3, 3])
    assert torch.equal(depth, expected_depth.expand(24, -1))
    assert torch.equal(tree.branch_steps, torch.tensor([2, 4, 7]).expand(24, -1))
    for leaf in range(24):
        for other in range(24):
            for t in range(10):
                same_node = bool(node[leaf, t] == node[other, t])
                # two leaves share a node exactly when they belong to the same subtree at that depth
                subtree = {0: 12, 1: 6, 2: 2, 3: 1}[int(expected_depth[t])]
                assert same_node == (leaf // subtree == other // subtree)
                if same_node:
                    assert ids_out[leaf, t] == ids_out[other, t]
    assert node.unique().numel() == 2 * (1 + 2 + 6 + 12)


def test_leaves_ending_before_a_split_stay_identical_and_count_once(tiny):
    model, tokenizer = tiny
    model = with_eos_bias(model, tokenizer.eos_token_id, 4.0)
    plan = LMTreePlan(split_positions=(3, 6), branching=(2, 2))
    ids, mask = left_padded(tokenizer, ["1 + 2 ="] * 6)
    tree = TreeCacheEngine(model, tokenizer).generate_tree(
        ids, mask, params_for(tokenizer), torch.Generator().manual_seed(1), plan
    )
    out, node = tree.generation, tree.prefix_tree.node_of_action
    valid = out.completion_mask > 0
    # Tokens sampled = distinct (node, position) pairs over valid actions.
    pairs = {(int(n), t) for (i, t) in valid.nonzero().tolist() for n in [node[i, t]]}
    assert tree.generated_tokens == len(pairs)
    early = (out.completion_mask.sum(1) <= 3).nonzero().flatten().tolist()
    assert early, "the boost should end some tree before its first split"
    for leaf in early:
        siblings = range(leaf - leaf % 4, leaf - leaf % 4 + 4)
        assert all(torch.equal(out.completion_ids[s], out.completion_ids[leaf]) for s in siblings)
        assert torch.equal(tree.branch_steps[leaf], torch.tensor([-1, -1]))


def test_tree_logprobs_match_rescoring_and_entropy_splits_wait_for_high_entropy(tiny):
    model, tokenizer = tiny
    plan = PLANS["entropy"]
    ids, mask = left_padded(tokenizer, ["1 + 2 =", "a b"])
    params = params_for(tokenizer, temperature=0.8)
    tree = TreeCacheEngine(model, tokenizer).generate_tree(ids, mask, params, torch.Generator().manual_seed(3), plan)
    out = tree.generation
    with torch.no_grad():
        logp = completion_scores(
            model, ids.repeat_interleave(8, 0), mask.repeat_interleave(8, 0), out.completion_ids,
            out.completion_mask, temperature=0.8, chunk_size=16,
        ).logp  # fmt: skip
    assert (logp - out.logp).abs().max().item() < 1e-4
    first = tree.branch_steps[:, 0]  # [N]
    assert torch.all((first >= 1) & (first <= 1 + plan.entropy_window))
    for leaf in range(len(first)):  # a split before the forced position happened at a high-entropy token
        step = int(first[leaf])
        if step < 1 + plan.entropy_window:
            prefix = out.completion_ids[leaf, :step]
            full = torch.cat([ids[leaf // 8][mask[leaf // 8] > 0], prefix])[None]
            with torch.no_grad():
                logits = model(full).logits[:, -1]
            assert sampling_entropy(logits, 0.8).item() >= plan.entropy_threshold - 1e-4


def test_segment_splits_follow_a_boundary_token_or_the_forced_position(tiny):
    model, tokenizer = tiny
    plan = PLANS["segments"]
    ids, mask = left_padded(tokenizer, ["1 + 2 =", "a b"])
    params = params_for(tokenizer, temperature=0.9, eos_token_ids=())
    tree = TreeCacheEngine(model, tokenizer).generate_tree(ids, mask, params, torch.Generator().manual_seed(4), plan)
    out, early = tree.generation, 0
    for depth, earliest in enumerate(plan.split_positions):
        steps = tree.branch_steps[:, depth]  # [N] the step before which each leaf's path split at this depth
        assert torch.all((steps >= earliest) & (steps <= earliest + plan.entropy_window))
        for leaf in range(out.completion_ids.shape[0]):
            step = int(steps[leaf])
            if step < earliest + plan.entropy_window:  # split before it was forced: the token before ended a segment
                assert bool(BOUNDARIES[out.completion_ids[leaf, step - 1]])
                early += 1
            if depth > 0:
                assert step > int(tree.branch_steps[leaf, depth - 1])
    assert early > 0, "no split waited for a boundary"


def test_sampling_entropy_is_hand_computed():
    logits = torch.log(torch.tensor([[0.5, 0.25, 0.25], [1.0, 1e-30, 1e-30]]))
    expected = torch.tensor([-(0.5 * torch.log(torch.tensor(0.5)) + 0.5 * torch.log(torch.tensor(0.25))), 0.0])
    torch.testing.assert_close(sampling_entropy(logits, 1.0), expected, atol=1e-6, rtol=0)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"split_positions": (), "branching": ()}, "split_positions=\\[\\] must be non-empty"),
        ({"split_positions": (0, 2), "branching": (2, 2)}, ">= 1"),
        ({"split_positions": (3, 2), "branching": (2, 2)}, "strictly increasing"),
        ({"split_positions": (2,), "branching": (2, 2)}, "one count >= 2 per split"),
        ({"split_positions": (2,), "branching": (1,)}, "one count >= 2 per split"),
        ({"split_positions": (2,), "branching": (2,), "entropy_threshold": 0.0}, "entropy_threshold=0.0"),
        ({"split_positions": (2,), "branching": (2,), "entropy_window": -1}, "entropy_window=-1"),
    ],
)
def test_plan_rejects_bad_shapes(kwargs, message):
    with pytest.raises(ValueError, match=message):
        LMTreePlan(**kwargs)


# ---- the causal-LM policy with policy.tree -----------------------------------------------------------------------


def tree_policy(tmp_path, **tree_overrides):
    from genalign.policies.lm.causal import CausalLMPolicyConfig, build_policy
    from genalign.policies.lm.trees import LMTreeConfig

    model_dir = build_tiny_causal_lm(tmp_path / "llama", architecture="llama", vocab_size=96)
    tree = LMTreeConfig(**({"enabled": True, "split_positions": [2, 4], "branching": [2, 2]} | tree_overrides))
    return build_policy(CausalLMPolicyConfig(model=str(model_dir), max_new_tokens=8, tree=tree), "cpu")


def test_policy_tree_rollout_declares_the_sampling_tree_and_scores_exactly(tmp_path):
    from genalign.algorithms.structure import token_prefix_tree
    from genalign.policies.base import RolloutRequest

    policy = tree_policy(tmp_path, trees_per_prompt=2)
    rows = [{"prompt": "1 + 2 ="}, {"prompt": "a b"}]
    rollout = policy.rollout(rows, 8, request=RolloutRequest(structure=frozenset({"prefix_tree"})))
    tree = rollout.structure.get("prefix_tree")
    assert tree is not None and rollout.group_ids.tolist() == [0] * 8 + [1] * 8
    # 2 prompts x 2 trees: 4 distinct roots, shared by the 4 leaves of each tree.
    assert tree.node_of_action[:, 0].view(4, 4).unique(dim=1).shape == (4, 1)
    assert tree.node_of_action[:, 0].unique().numel() == 4
    assert rollout.counts["generated_tokens"] < rollout.counts["completion_tokens"]
    # The sampling tree refines the token prefix tree: leaves sharing a sampling node share their tokens.
    token_tree = token_prefix_tree(rollout.per_sample["completion_ids"], rollout.action_mask, rollout.group_ids)
    for t in range(tree.node_of_action.shape[1]):
        for node in tree.node_of_action[:, t].unique():
            members = (tree.node_of_action[:, t] == node) & (rollout.action_mask[:, t] > 0)
            assert token_tree.node_of_action[members, t].unique().numel() <= 1
    scored = policy.score(rollout).logp
    assert (scored - rollout.old_logp).abs().max().item() < 1e-4
    evaluation = policy.rollout(rows, 8, mode="eval", request=RolloutRequest(structure=frozenset({"prefix_tree"})))
    assert evaluation.counts["generated_tokens"] == evaluation.counts["completion_tokens"]  # eval: independent samples


def test_policy_tree_at_segment_boundaries_splits_after_the_tokenizers_boundary_tokens(tmp_path):
    from genalign.policies.base import RolloutRequest

    policy = tree_policy(tmp_path, at_segment_boundaries=True, entropy_window=3)
    table = policy.segments.table()  # [V] the tokenizer's boundary tokens
    assert policy.config.tree.plan(table).boundary_table is table
    request = RolloutRequest(structure=frozenset({"prefix_tree"}))
    rollout = policy.rollout([{"prompt": "1 + 2 ="}, {"prompt": "a b"}], 4, request=request)
    ids, mask = rollout.per_sample["completion_ids"], rollout.action_mask
    depth = rollout.structure.get("prefix_tree").depth  # [N, T]
    split = (depth >= 1).any(dim=1)  # [N] leaves whose path split (a leaf that ended first never does)
    first = (depth >= 1).long().argmax(dim=1)  # [N] first action after the first split
    assert bool(split.any()) and torch.all((first[split] >= 2) & (first[split] <= 2 + 3))  # split position .. forced
    for leaf in split.nonzero().flatten().tolist():
        step = int(first[leaf])
        if step < 2 + 3 and mask[leaf, step] > 0:  # split before the forced position: after a boundary token
            assert bool(table[ids[leaf, step - 1]])


def test_policy_tree_rejects_a_group_size_that_is_not_the_leaf_count(tmp_path):
    policy = tree_policy(tmp_path)
    with pytest.raises(ValueError, match=r"algorithm.group_size=6 must equal .* = 1 × 4 = 4"):
        policy.rollout([{"prompt": "1 + 2 ="}], 6)


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"split_positions": [0, 4]}, r"policy.tree.split_positions=\[0, 4\] must be .* >= 1"),
        ({"split_positions": [2, 8]}, r"must be < policy.max_new_tokens=8"),
        ({"branching": [2]}, r"policy.tree.branching=\[2\] needs one count >= 2 per split position \(2\)"),
        ({"trees_per_prompt": 0}, "policy.tree.trees_per_prompt=0 must be >= 1"),
        ({"entropy_threshold": -1.0}, "policy.tree.entropy_threshold=-1.0 must be > 0"),
        ({"entropy_window": -2}, "policy.tree.entropy_window=-2 must be >= 0"),
        ({"at_segment_boundaries": True, "entropy_threshold": 1.0}, "split at high entropy or at segment boundaries"),
        ({"engine": "hf"}, "policy.tree.enabled=true needs policy.engine='static', got 'hf'"),
    ],
)
def test_tree_config_validation_names_field_value_and_fix(overrides, message):
    from genalign.policies.lm.causal import CausalLMPolicyConfig
    from genalign.policies.lm.trees import LMTreeConfig

    engine = overrides.pop("engine", "static")
    tree = LMTreeConfig(**({"enabled": True, "split_positions": [2, 4], "branching": [2, 2]} | overrides))
    with pytest.raises(ValueError, match=message):
        CausalLMPolicyConfig(max_new_tokens=8, tree=tree, engine=engine).validate()


def test_the_config_loader_reads_policy_tree_and_checks_it_against_the_engine():
    from genalign.config import ConfigError, from_dict
    from genalign.config.schema import TrainConfig

    def load(**policy):
        base = {"family": "causal_lm", "model": "builtin:arith-lm", "max_new_tokens": 6}
        tree = {"enabled": True, "split_positions": [1, 3], "branching": [2, 4], "trees_per_prompt": 2}
        return from_dict(
            TrainConfig,
            {
                "policy": base | {"tree": tree} | policy,
                "data": {"train": {"source": "procedural:arithmetic", "args": {"size": 8}}},
                "rewards": [{"fn": "exact_match"}],
                "algorithm": {"group_size": 16, "prompts_per_step": 2, "credit": ["tree_grpo"]},
            },
        )

    assert load().policy.tree.group_size == 16
    with pytest.raises(ConfigError, match=r"policy.tree.enabled=true needs policy.engine='static'"):
        load(engine="hf")
