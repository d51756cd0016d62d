"""The trainer's collection of a step's samples: extra sampling rounds asked for by a sample source are drawn for the
right prompts, joined with the first rollout and rewarded like it (toy policy)."""

from __future__ import annotations

import torch

import tests.sampling.truncating_toy  # noqa: F401  (registers the toy_truncating family)
from genalign.sampling import Decision, SampleSourceStage
from genalign.trainer import recipe
from genalign.trainer.step_samples import collect_samples
from tests.sampling.test_training import toy_config


class MoreForFailures:
    """Two extra samples for each prompt whose samples so far hold no success; one extra round."""

    rounds, needs_tokens, forces, needs_guidance, pool, max_draw = 2, False, False, frozenset(), 1.0, 1.0

    def __init__(self) -> None:
        self.final = None

    def choose(self, pool, wanted, generator):
        return pool

    def samples_per_prompt(self, group_size):
        return None

    def more_samples(self, outcome):
        wanted = {}
        for position in outcome.positions.unique().tolist():
            if float(outcome.rewards[outcome.positions == position].nan_to_num(0.0).max()) < 1.0:
                wanted[position] = 2
        return wanted

    def round_guidance(self, outcome):
        return {}

    def forced_samples(self, outcome):
        return []

    def after_rewards(self, outcome):
        self.final = outcome
        return Decision()

    def state_dict(self):
        return {}

    def load_state_dict(self, state):
        return None


def test_extra_round_samples_join_their_groups_with_their_rewards(tmp_path):
    run, _ = recipe.start_run(toy_config(tmp_path))
    rule = MoreForFailures()
    run.sources = SampleSourceStage([("more", rule)], seed=0, group_size=4)
    recipe.seed_step(0, 1, 0)
    first = recipe.sample_step(run, 1)
    first_table, _ = run.rewards(first.rows, first.outputs, completion_length=first.action_mask.sum(1).long().tolist())
    first_sum = run.rewards.table_sum(first_table)
    failed = [p for p in first.group_ids.unique().tolist() if float(first_sum[first.group_ids == p].max()) < 1.0]
    assert failed, "the toy's first rollout should leave some prompt without a full success"
    samples = collect_samples(run, 1, first, recipe.rollout_request(run))
    n = len(first)
    assert len(samples.rollout) == n + 2 * len(failed)
    assert samples.rollout.group_ids[n:].tolist() == [p for p in sorted(failed) for _ in range(2)]
    assert samples.rollout.rows[n:] == [run.sources.candidate(p).row for p in sorted(failed) for _ in range(2)]
    extra_table, _ = run.rewards(samples.rollout.rows[n:], samples.rollout.outputs[n:],
                                 completion_length=samples.rollout.action_mask[n:].sum(1).long().tolist())  # fmt: skip
    torch.testing.assert_close(samples.reward_table, torch.cat([first_table, extra_table]), equal_nan=True)
    assert rule.final is not None and len(rule.final) == n + 2 * len(failed) and rule.final.round == 1
    assert samples.choice.stats["sampling/extra_samples"] == 2 * len(failed)
    assert samples.choice.stats["sampling/rounds"] == 2.0
    assert not bool(samples.forced.any())
