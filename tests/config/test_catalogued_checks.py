"""``genalign validate`` checks a config against the generated catalogue instead of the live registries (no option
module, no torch): every check gives the same verdict and the same message in both modes, a bad value of an option
whose bound form checks it included (validate then binds it with the live registry)."""

from __future__ import annotations

from pathlib import Path

import pytest

from genalign.catalog.registries import catalogued_checks
from genalign.config import ConfigError, load_config, to_dict

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
LM, FLOW, DLM = (CONFIGS / name for name in ("demo_arith_grpo.yaml", "demo_shapes_flow_grpo.yaml",
                                              "demo_arith_dlm_espo.yaml"))  # fmt: skip

#: (config, overrides, a phrase of the expected message)
BAD = [
    (LM, ["algorithm.advantage=grpoo"], "Did you mean 'grpo'"),
    (LM, ["algorithm.clip.eps_hgh=0.3"], "Did you mean 'eps_high'"),
    (LM, ["algorithm.objective.eps_high=0.3"], "'eps_high' is a keyword of clip form 'ppo'"),
    (LM, ["algorithm.credit=[noise_aware_steps, tree]"], "put it first in the credit list"),
    (LM, ["algorithm.objective=disco", "algorithm.clip=ppo", "algorithm.aggregation=token_mean",
          "algorithm.micro_batch_size=8"], "contradicts algorithm.objective = 'disco'"),
    (LM, ["algorithm.credit=[noise_aware_steps]"], "Families whose default options supply 'step_std': flow"),
    (LM, ["algorithm.async_rollout.enabled=true"], "algorithm.clip=off_policy"),
    (LM, ["algorithm.update_schedule.fast_steps=2"], "update schedule 'standard' got unknown hyper-parameter(s)"),
    (LM, ["algorithm.update_schedule.inner_epochs=2"], "which the trainer supplies itself"),
    (LM, ["algorithm.advantage_clip=-1"], "algorithm.advantage_clip = -1"),
    (LM, ["algorithm.reward_combination=self_paced", "algorithm.reward_combination.competence_momentum=1.5"],
     "competence_momentum=1.5 must be in [0, 1)"),  # a bound form's own check: validate binds it
    (LM, ["rewards.0.args.lowercas=true"], "Did you mean 'lowercase'"),
    (LM, ["rewards.0.fn=exact_matc"], "Did you mean 'exact_match'"),
    (FLOW, ["policy.dynamics=flow_sdee"], "Did you mean 'flow_sde'"),
    (FLOW, ["policy.architecture=sd4"], "policy.architecture='sd4' is not a registered flow architecture"),
    (FLOW, ["rewards.0.args.partial_credt=true"], "Did you mean 'partial_credit'"),
    (DLM, ["policy.likelihood_proxy.nosie=1"], "likelihood proxy 'coupled' got unknown hyper-parameter(s) 'nosie'"),
]  # fmt: skip


def _message(path: Path, overrides: list[str]) -> str:
    with pytest.raises(ConfigError) as caught:
        load_config(path, overrides)
    return str(caught.value)


@pytest.mark.parametrize(("path", "overrides", "phrase"), BAD, ids=[" ".join(o) for _, o, _ in BAD])
def test_a_bad_config_gets_the_same_message_from_the_catalogue(path, overrides, phrase):
    live = _message(path, overrides)
    with catalogued_checks():
        catalogued = _message(path, overrides)
    assert catalogued == live
    assert phrase in live, live


def test_a_literal_reward_argument_is_checked_from_the_catalogue():
    overrides = ["rewards.0.fn=math_equivalence", "rewards.0.args={answer_format: latex}"]
    with catalogued_checks():
        message = _message(LM, overrides)
    assert message == _message(LM, overrides) and "'latex' is not valid; use one of 'auto', 'boxed'" in message


@pytest.mark.parametrize("path", [LM, FLOW, DLM], ids=lambda p: p.stem)
def test_a_valid_config_resolves_the_same_in_both_modes(path):
    with catalogued_checks():
        catalogued = to_dict(load_config(path))
    assert catalogued == to_dict(load_config(path))
