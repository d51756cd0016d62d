"""The adapter contract, checked the same way for every policy family and training mode (shared/ARCHITECTURE.md,
contracts 2-4): the first ratio is exactly 1, scores do not depend on the micro-batch split, save -> load and
state_dict -> load_state_dict restore the policy exactly, and a run killed with SIGKILL after a checkpoint resumes with
``run.resume=latest`` to the uninterrupted run's metrics and final weights, bit for bit.

The cases (tests/policies/contract_cases.py) cover every built-in family (``genalign.policies.BUILTIN_FAMILIES``); a new family
fails :func:`test_every_registered_family_has_a_contract_case` until it gets one. Every registered flow architecture
has a case of its own on its tiny random pipeline (the architecture matrix).
"""

from __future__ import annotations

import itertools
import os
from pathlib import Path

import numpy as np
import pytest
import torch

import tests.policies.contract_reward  # noqa: F401  (registers the reward)
from genalign.algorithms import names_by
from genalign.config import from_dict
from genalign.config.schema import TrainConfig
from genalign.data import load_rows
from genalign.policies import BUILTIN_FAMILIES
from genalign.policies.base import Policy, Rollout, RolloutRequest, ScoreRequest
from genalign.trainer.evaluate import evaluation_randomness
from genalign.trainer.recipe import build_policy
from tests.policies.contract_cases import ARCHITECTURE_CASES, CASES, case_config
from tests.policies.contract_runs import check_resumed_exactly, killed_runs_of

pytestmark = pytest.mark.heavy(cpu_s=150)  # scheduled first (tests/conftest.py)

os.environ.setdefault("HF_HUB_OFFLINE", "1")
ROOT = Path(__file__).resolve().parents[2]
RUNNER = ROOT / "tests" / "policies" / "run_contract.py"


def build(case: str, tmp_path: Path) -> tuple[Policy, TrainConfig]:
    torch.manual_seed(0)
    config = from_dict(TrainConfig, case_config(case, str(tmp_path / "run")))
    return build_policy(config, torch.device("cpu")), config


def sample(policy: Policy, config: TrainConfig) -> Rollout:
    """A training rollout with the structure the case's algorithm reads (as the trainer requests it)."""
    rows = load_rows(config.data.train)[: config.algorithm.prompts_per_step]
    structure = names_by("rollout", config.algorithm.needs())
    return policy.rollout(rows, config.algorithm.group_size, request=RolloutRequest(structure=structure))


def same_outputs(a: list, b: list) -> bool:
    return len(a) == len(b) and all(np.array_equal(np.asarray(x), np.asarray(y)) for x, y in zip(a, b))


def request_of(policy: Policy, config: TrainConfig) -> ScoreRequest:
    """Every feature the family supplies that the case's algorithm can ask for."""
    features = policy.capabilities.signals
    names = {"entropy", "velocity"} & features
    kl = {"kl": "k3"} if "kl" in features and config.algorithm.kl_coef > 0 else {}
    return ScoreRequest.of(*names, **kl)


def scores(policy: Policy, rollout: Rollout, request: ScoreRequest, parts: int = 1) -> torch.Tensor:
    """``logp`` of ``rollout`` scored in ``parts`` contiguous micro-batches, without gradient."""
    policy.on_inner_epoch(0)
    bounds = torch.linspace(0, len(rollout), parts + 1).long().tolist()
    with torch.no_grad():
        pieces = [policy.score(rollout.select(range(a, b)), request).logp for a, b in itertools.pairwise(bounds)]
    return torch.cat(pieces)


def perturb(policy: Policy) -> None:
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for param in policy.trainable_parameters():
            param.add_(0.01 * torch.randn(param.shape, generator=generator, dtype=param.dtype))


def test_every_registered_family_has_a_contract_case():
    covered = {family for family, _ in CASES.values()}
    missing = sorted(set(BUILTIN_FAMILIES) - covered)
    assert not missing, f"add a case to tests/policies/contract_cases.py for policy families {missing}"


@pytest.mark.parametrize("case", list(CASES))
def test_first_ratio_is_one_and_scores_do_not_depend_on_the_micro_batch_split(case, tmp_path):
    policy, config = build(case, tmp_path)
    rollout = sample(policy, config)
    request = request_of(policy, config)
    whole = scores(policy, rollout, request)
    assert torch.equal(whole, scores(policy, rollout, request)), "scoring is deterministic"
    if policy.capabilities.rollout_logp_is_exact:  # the trainer uses the sampler's log-probs as old log-probs
        assert torch.equal(whole, rollout.old_logp.to(whole.device)), "first ratio must be exactly 1"
    halves = scores(policy, rollout, request, parts=2)
    assert torch.equal(halves, whole), "scores must not depend on the micro-batch split"


@pytest.mark.parametrize("case", list(CASES))
def test_save_then_load_gives_identical_scores(case, tmp_path):
    policy, config = build(case, tmp_path)
    perturb(policy)
    rollout = sample(policy, config)
    request = request_of(policy, config)
    expected = scores(policy, rollout, request)
    policy.save(tmp_path / "weights")
    restored, _ = build(case, tmp_path)
    restored.load(tmp_path / "weights")
    assert torch.equal(scores(restored, rollout, request), expected)


@pytest.mark.parametrize("case", list(CASES))
def test_state_dict_round_trip_restores_every_generator_and_average(case, tmp_path):
    policy, config = build(case, tmp_path)
    policy.on_step(3)
    sample(policy, config)  # the generators have moved
    perturb(policy)
    policy.after_optimizer_step()  # averages (EMA, NFT's old model) have moved
    policy.save(tmp_path / "weights")
    torch.save(policy.state_dict(), tmp_path / "state.pt")
    expected = sample(policy, config)

    restored, _ = build(case, tmp_path)
    restored.load(tmp_path / "weights")
    restored.load_state_dict(torch.load(tmp_path / "state.pt", weights_only=True))  # tensors and plain values only
    again = sample(restored, config)
    assert same_outputs(again.outputs, expected.outputs)
    assert torch.equal(again.old_logp, expected.old_logp) and torch.equal(again.action_mask, expected.action_mask)
    request = request_of(policy, config)
    assert torch.equal(scores(restored, again, request), scores(policy, expected, request))
    assert restored.state_dict().keys() == policy.state_dict().keys()


@pytest.mark.parametrize("case", list(CASES))
def test_evaluation_repeats_its_noise_and_leaves_the_training_stream_alone(case, tmp_path):
    policy, config = build(case, tmp_path)
    rows = load_rows(config.data.train)[:2]

    def evaluation_outputs() -> list:
        with torch.no_grad(), evaluation_randomness(policy, seed=5), policy.evaluation_weights():
            return policy.rollout(rows, 1, mode="eval").outputs

    generators_before = {name: g.get_state() for name, g in policy.random_generators().items()}
    first = evaluation_outputs()
    assert same_outputs(evaluation_outputs(), first), "every evaluation samples with the same noise"
    for name, generator in policy.random_generators().items():
        assert torch.equal(generator.get_state(), generators_before[name]), f"evaluation moved {name}"
    never_evaluated, _ = build(case, tmp_path)
    after_evaluation, expected = sample(policy, config), sample(never_evaluated, config)
    assert same_outputs(after_evaluation.outputs, expected.outputs), "evaluating must not change what training samples"


#: the families' cases (the flow architecture matrix resumes in tests/policies/test_contract_architectures.py)
FAMILY_CASES = [case for case in CASES if case not in ARCHITECTURE_CASES]


@pytest.fixture(scope="module")
def killed_runs(tmp_path_factory) -> dict[str, dict]:
    return killed_runs_of(FAMILY_CASES, tmp_path_factory.mktemp("killed_runs"))


@pytest.mark.parametrize("case", FAMILY_CASES)
def test_run_killed_after_a_checkpoint_resumes_exactly(case, killed_runs):
    """4 steps with a checkpoint every 2; the killed run dies by SIGKILL inside step 3 (its reward call), after the
    step-2 checkpoint, and ``run.resume=latest`` finishes it (in another process)."""
    check_resumed_exactly(killed_runs[case])
