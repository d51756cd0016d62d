"""Sharded training (FSDP2 over 2 CPU processes, gloo) against one process, for every family's tiny model.

Both layouts train on the same rollouts (``run_steps.py`` samples the whole step in every process with one seed), so
after 3 steps the parameters and optimizer state must agree up to float32 rounding; checkpoints written by 2 processes
must restore exactly in 1 and vice versa, and training on from them must continue the run of the other layout.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from tests import prepared_python
from tests.policies.contract_cases import ARCHITECTURE_CASES, CASES

pytestmark = pytest.mark.heavy(cpu_s=95)  # scheduled first (tests/conftest.py)

ROOT = Path(__file__).resolve().parents[2]
RUN_STEPS = ROOT / "tests" / "parallel" / "run_steps.py"
TORCHRUN = (sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2")
RESUMED = ["causal_lm", "flow_sde"]
#: cases sharded training is compared on: the multi-turn cases are left out because a multi-turn rollout is padded to
#: the longest trajectory of the process that sampled it, so one and two processes score different token grids (float
#: rounding differs at ~1e-4; their single-process exactness is the contract test's); so are the flow architecture
#: cases, which shard the same flow policy code as flow_sde
SHARDED_CASES = [
    case
    for case, (_, config) in CASES.items()
    if "multi_turn" not in config["policy"] and case not in ARCHITECTURE_CASES
]


def _run(out: Path, cases: list[str], *args: str, processes: int) -> None:
    out.mkdir(parents=True, exist_ok=True)
    launcher = TORCHRUN if processes == 2 else (sys.executable,)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    proc = prepared_python.run(
        [*launcher, str(RUN_STEPS), str(out), *cases, *args], cwd=ROOT, env=env, capture_output=True, text=True,
        timeout=600,
    )  # fmt: skip
    if proc.returncode != 0:
        raise AssertionError(f"exit {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}")


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> Path:
    """``one``/``two``: every case for 3 steps (checkpoint at step 2) with 1 and 2 processes; ``two_to_one`` and
    ``one_to_two``: the resumed cases restored from the other layout's step-2 checkpoint and trained to step 3."""
    root = tmp_path_factory.mktemp("parallel")
    _run(root / "one", SHARDED_CASES, "--save-at", "2", processes=1)
    _run(root / "two", SHARDED_CASES, "--save-at", "2", processes=2)
    _run(root / "two_to_one", RESUMED, "--resume-from", str(root / "two"), "--resume-step", "2", processes=1)
    _run(root / "one_to_two", RESUMED, "--resume-from", str(root / "one"), "--resume-step", "2", processes=2)
    return root


def _max_difference(a: Path, b: Path) -> float:
    left, right = load_file(str(a)), load_file(str(b))
    assert left.keys() == right.keys()
    assert any(key.startswith("optim/") for key in left), "the optimizer state is compared too"
    return max(float((left[k] - right[k]).abs().max()) for k in left)


@pytest.mark.parametrize("case", SHARDED_CASES)
def test_two_sharded_processes_train_to_the_parameters_of_one(runs, case):
    one, two = (
        load_file(str(runs / "one" / f"{case}.safetensors")),
        load_file(str(runs / "two" / f"{case}.safetensors")),
    )
    initial = load_file(str(runs / "one" / f"{case}.initial.safetensors"))
    assert any(not torch.equal(one[k], initial[k]) for k in one if k.startswith("param/")), "training moved them"
    assert _max_difference(runs / "one" / f"{case}.safetensors", runs / "two" / f"{case}.safetensors") <= 1e-5
    assert two.keys() == one.keys()


@pytest.mark.parametrize("case", RESUMED)
def test_checkpoints_restore_exactly_across_process_counts(runs, case):
    assert (
        _max_difference(
            runs / "two" / f"{case}.saved.safetensors", runs / "two_to_one" / f"{case}.restored.safetensors"
        )
        == 0
    )
    assert (
        _max_difference(
            runs / "one" / f"{case}.saved.safetensors", runs / "one_to_two" / f"{case}.restored.safetensors"
        )
        == 0
    )
    shards = sorted(p.name for p in (runs / "two" / f"{case}-run" / "checkpoints" / "step-2" / "train_state").iterdir())
    assert len(shards) == 2, shards  # one file per process, read back by one


@pytest.mark.parametrize("case", RESUMED)
def test_training_on_from_the_other_layouts_checkpoint_continues_its_run(runs, case):
    assert _max_difference(runs / "two" / f"{case}.safetensors", runs / "two_to_one" / f"{case}.safetensors") <= 1e-5
    assert _max_difference(runs / "one" / f"{case}.safetensors", runs / "one_to_two" / f"{case}.safetensors") <= 1e-5
