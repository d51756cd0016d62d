"""Tree rollouts of multi-turn episodes that branch at turn boundaries (``policy.multi_turn.tree``, Tree-GRPO [165]):
branches share their prefix's tokens exactly, the branch's environment is in the parent's state, the forked KV cache
rows sample what a fresh prefill samples, and the tree credit reads the turn-level tree."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest
import torch

from genalign.algorithms import StepBatch, apply_credit
from genalign.policies.base import RolloutRequest
from genalign.policies.lm.causal import CausalLMPolicyConfig, build_policy
from genalign.policies.lm.engines.lean_decoder import StaticKVCache
from genalign.policies.lm.engines.turn_cache import TurnCaches
from genalign.policies.lm.multi_turn_options import MultiTurnOptions
from genalign.policies.lm.tiny import build_tiny_causal_lm
from genalign.policies.lm.turn_tree_options import TurnTreeOptions
from genalign.policies.lm.turn_trees import turn_prefix_tree
from tests.policies.lm.test_multi_turn import HERE, ROWS, scores

torch.set_num_threads(1)
TREE = {"enabled": True, "split_turns": [1], "branching": [2], "trees_per_prompt": 2}
REQUEST = RolloutRequest(structure=frozenset({"turn_ids", "truncated", "prefix_tree"}))


@pytest.fixture(scope="module")
def model_path(tmp_path_factory):
    return build_tiny_causal_lm(tmp_path_factory.mktemp("models") / "qwen2", vocab_size=96)


def tree_policy(model_path, environments=f"{HERE}:Scripted", tree=TREE, **multi_turn):
    options = MultiTurnOptions(environments=environments, tree=TurnTreeOptions(**tree), **multi_turn)
    config = CausalLMPolicyConfig(model=str(model_path), max_new_tokens=5, temperature=0.9, use_chat_template=True,
                                  multi_turn=options)  # fmt: skip
    return build_policy(config, "cpu")


def split_position(rollout, i: int) -> int:
    """The completion position where sample ``i``'s turn 1 starts (its first model token of turn 1)."""
    turn_ids, mask = rollout.structure["turn_ids"][i], rollout.action_mask[i] > 0
    return int(((turn_ids == 1) & mask).nonzero()[0])


def test_branches_share_the_prefix_tokens_exactly_and_their_environment_state(model_path):
    policy = tree_policy(model_path)
    rollout = policy.rollout(ROWS, 4, request=REQUEST)
    ids, logp, tree = rollout.per_sample["completion_ids"], rollout.old_logp, rollout.structure["prefix_tree"]
    assert len(rollout) == 8 and rollout.group_ids.tolist() == [0] * 4 + [1] * 4
    for first in range(0, 8, 2):  # leaves (first, first + 1) are the two branches of one root
        split = split_position(rollout, first)
        assert split == split_position(rollout, first + 1)
        assert torch.equal(ids[first, :split], ids[first + 1, :split]), "the prefix: turn 0 and its answer"
        assert torch.equal(logp[first, :split], logp[first + 1, :split])
        assert (tree.node_of_action[first, :split] == tree.node_of_action[first + 1, :split]).all()
        assert (tree.depth[first, :split] == 0).all() and (tree.depth[first, split:] == 1).all()
        assert tree.node_of_action[first, split] != tree.node_of_action[first + 1, split], "sibling nodes"
    roots = tree.node_of_action[:, 0].tolist()
    assert roots[0] == roots[1] != roots[2] == roots[3], "two trees per row"
    # Scripted ends after 3 turns: a branch's environment replayed the parent's turn, so every leaf takes exactly 3
    # (a fresh environment would have taken 4, the limit, and been truncated)
    assert rollout.structure["turn_ids"].max(dim=1).values.tolist() == [2] * 8
    assert not rollout.structure["truncated"].any()
    # 4 roots × 1 turn + 8 leaves × 2 turns; one copy per root
    assert (
        rollout.counts["turns"] == 20 and rollout.counts["tree_branches"] == 4 and rollout.counts["trajectories"] == 8
    )
    mask = rollout.action_mask > 0
    assert torch.allclose(scores(policy, rollout)[mask], logp[mask], atol=1e-4)


def test_a_state_environment_is_forked_from_its_state(model_path):
    """guess_number restores its state (state_dict): a branch continues the parent's game (same guesses so far)."""
    from genalign.environments.branching import copy_mode, fork_episode
    from genalign.environments.tasks.guessing import GuessNumber

    environments = MultiTurnOptions(environments="guess_number").environment_set()
    row = {"prompt": "guess", "secret": 7, "low": 1, "high": 10, "max_guesses": 4}
    episode = environments.start(row)
    episode.environment.guess(3)
    assert isinstance(episode.environment, GuessNumber) and copy_mode(episode.environment) == "state"
    branch = fork_episode(environments, row, episode, turns=[])
    assert branch.environment is not episode.environment
    assert branch.environment.state_dict() == episode.environment.state_dict()


def test_the_forked_cache_samples_what_a_fresh_prefill_samples(model_path, monkeypatch):
    """Same seed, float32: branches continued from forked KV rows (no prefill of the prefix) give the tokens and the
    behaviour log-probs of the re-encoding engine, which encodes every branch's whole context."""
    encoded = []  # per call of the kept-cache engine: (context length, tokens encoded) of each conversation
    original = TurnCaches.kept_lengths

    def recording(self, keys, contexts):
        kept = original(self, keys, contexts)
        encoded.append([(len(context), len(context) - size) for context, size in zip(contexts, kept, strict=True)])
        return kept

    monkeypatch.setattr(TurnCaches, "kept_lengths", recording)
    rollouts = [tree_policy(model_path, keep_kv_cache=keep).rollout(ROWS, 4, request=REQUEST) for keep in (True, False)]
    forked, fresh = rollouts
    assert torch.equal(forked.per_sample["completion_ids"], fresh.per_sample["completion_ids"])
    assert torch.equal(forked.action_mask, fresh.action_mask)
    delta = float((forked.old_logp - fresh.old_logp).abs().max())
    assert delta <= 1e-5, delta
    # the first call after the split encodes only each branch's new tokens (the answer and the last sampled token):
    # a copy as few as its parent, and far fewer than its context (measured: 8 of 21 and 25)
    second = encoded[1]
    assert len(second) == 8 and all(new == second[i - i % 2][1] for i, (_, new) in enumerate(second)), second
    assert all(new < context / 2 for context, new in second), second


def test_fork_copies_the_held_rows_after_their_parent():
    keys = torch.arange(2 * 2 * 1 * 4 * 1, dtype=torch.float32).reshape(2, 2, 1, 4, 1)  # [layers, b, heads, cap, dim]
    mask = torch.tensor([[True, True, False, False], [False, True, True, False]])
    caches = TurnCaches()
    caches.hold(["a", "b"], [[1, 2], [3, 4]], [(torch.tensor([0, 1]), StaticKVCache(keys, -keys, mask))])
    caches.fork(["a"], [["a1", "a2"]])
    ((held, cache),) = caches.pieces
    assert held == ["a", "a1", "a2", "b"]
    assert torch.equal(cache.keys, keys[:, [0, 0, 0, 1]]) and torch.equal(cache.values, -keys[:, [0, 0, 0, 1]])
    assert torch.equal(cache.key_mask, mask[[0, 0, 0, 1]])
    assert caches.ids["a2"] == [1, 2] and caches.ids["b"] == [3, 4]


def test_tree_grpo_on_a_hand_built_turn_tree():
    """Two trees of two leaves (one group); each leaf: turn 0 (2 tokens), the answer (1 environment token), turn 1
    (2 tokens). Outcomes A = (1, −1, 0.5, 0.5): the intra-tree level of tree 0 is ((1 − 0)/1, (−1 − 0)/1) (population
    std 1), of tree 1 zero (its leaves agree); tree_grpo adds it to the inter-tree advantage A on every model token."""
    paths = [[(0, 0, 0), (3, 2, 1)], [(0, 0, 0), (3, 3, 1)], [(0, 1, 0), (3, 4, 1)], [(0, 1, 0), (3, 5, 1)]]
    tree = turn_prefix_tree(paths, 5)
    assert tree.node_of_action.tolist()[1] == [0, 0, 0, 3, 3] and tree.depth.tolist()[2] == [0, 0, 0, 1, 1]
    mask = torch.tensor([[1.0, 1, 0, 1, 1]] * 4)
    outcome = torch.tensor([1.0, -1.0, 0.5, 0.5], dtype=torch.float64)
    batch = StepBatch(sample_advantages=outcome, mask=mask.double(), group_ids=torch.zeros(4, dtype=torch.long),
                      prefix_tree=tree)  # fmt: skip
    out = apply_credit([("tree_grpo", {})], outcome, batch)
    expected = torch.tensor([2.0, -2.0, 0.5, 0.5], dtype=torch.float64)[:, None] * mask.double()
    torch.testing.assert_close(out, expected, rtol=0, atol=1e-5)


def test_tree_options_are_checked_at_config_load(model_path):
    with pytest.raises(ValueError, match=r"split_turns=\[4\] must be < policy.multi_turn.max_turns=4"):
        MultiTurnOptions(
            environments=f"{HERE}:Scripted", tree=TurnTreeOptions(enabled=True, split_turns=[4])
        ).validate()
    with pytest.raises(ValueError, match=r"branching=\[2, 2\] needs one count >= 2 per split turn"):
        TurnTreeOptions(enabled=True, branching=[2, 2]).validate(max_turns=4)
    policy = tree_policy(model_path)
    assert policy.config.capabilities().group_size == 4
    with pytest.raises(ValueError, match=r"group_size=3 must equal .* = 4"):
        policy.rollout(ROWS, 3, request=REQUEST)
    independent = policy.rollout(ROWS, 3, mode="eval", request=REQUEST)  # evaluation: independent trajectories
    assert len(independent) == 6 and "tree_branches" not in independent.counts


def test_an_environment_that_cannot_be_copied_is_counted_and_ends_the_branch(model_path):
    policy = tree_policy(model_path, environments=f"{HERE}:CannotRestore")
    rollout = policy.rollout(ROWS, 4, request=REQUEST)
    assert rollout.counts["environment_errors/fork"] == 4 and rollout.counts["tree_branches"] == 4
    truncated = rollout.structure["truncated"].tolist()
    assert truncated == [False, True] * 4, "each copy ends at the split, truncated; its parent runs on"
    assert rollout.structure["turn_ids"].max(dim=1).values.tolist() == [2, 0] * 4
    assert len(policy.environment_failures) >= 4 and "fork: RuntimeError" in policy.environment_failures[-1]
