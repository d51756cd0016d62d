"""Every stateful sample-source rule inside the training recipe (``builtin:arith-lm``): a run killed after a
checkpoint and resumed with ``run.resume=latest`` logs exactly the metrics of the uninterrupted run (trackers,
curricula, buffers, hint tiers and prefix fractions are checkpointed), and each rule acted during the run."""

from __future__ import annotations

import dataclasses
import json

import pytest

from genalign.trainer import recipe
from tests.experimental.sampling.test_replay_training import config, records, train_killed_in_step

pytestmark = pytest.mark.heavy(cpu_s=30)  # scheduled first (tests/conftest.py)

#: rule set -> (the rules' hyper-parameters by name, a metrics key that shows the rules acted)
CASES = {
    "curricula": ({"adagrpo_curriculum": {}, "vas": {}}, "sampling/vas/tracked"),
    "residuals_and_allocation": ({"erpo": {}, "xrpo": {}}, "sampling/extra_samples"),
    "eframe": ({"eframe": {"extra_samples": 4}}, "sampling/extra_samples"),
    "ar3po": ({"ar3po": {"stages": 3, "stage_samples": 2}}, "sampling/extra_samples"),
    "guidance": (
        {"adaprefix": {"solution_column": "answer", "init": 0.5}, "scaf": {"hints": ["answer"], "patience": 1}},
        "sampling/adaprefix/prefixed",
    ),
}


def rule_config(out, rules: dict, **run):
    base = config(out, **run)
    algorithm = dataclasses.replace(
        base.algorithm, sample_sources=[{"name": name, **args} for name, args in rules.items()]
    )
    return dataclasses.replace(base, algorithm=algorithm)


@pytest.mark.parametrize("case", list(CASES))
def test_a_killed_run_resumes_the_rules_exactly(case, tmp_path, monkeypatch):
    rules, acted = CASES[case]
    straight = tmp_path / "straight"
    recipe.train(rule_config(straight, rules))
    expected = records(straight)
    steps = [json.loads(line) for line in expected]
    assert any((s.get(acted) or 0.0) > 0 for s in steps), f"{case}: {acted} never positive"

    crashed = tmp_path / "crashed"
    train_killed_in_step(monkeypatch, rule_config(crashed, rules))
    recipe.train(rule_config(crashed, rules, resume="latest"))
    assert records(crashed) == expected
    state = json.loads((crashed / "checkpoints" / "step-6" / "trainer_state.json").read_text())
    assert set(state["extra"]["components"]["sample_sources"]) == set(rules)
