"""The adapter contract's kill-and-resume test for the flow architecture matrix (tests/policies/contract_cases.py,
``ARCHITECTURE_CASES``): every architecture's run killed by SIGKILL after a checkpoint resumes exactly. Its other
contract tests run in tests/policies/test_contract.py; this half trains on another test process, in 2 steps (a
checkpoint after step 1, the kill inside step 2): the families' cases already resume across a longer run, and what an
architecture adds to a resume (its stored conditioning and trajectory tensors, its LoRA) is all in the first
checkpoint."""

from __future__ import annotations

import pytest

from tests.policies.contract_cases import ARCHITECTURE_CASES
from tests.policies.contract_runs import check_resumed_exactly, killed_runs_of

pytestmark = pytest.mark.heavy(cpu_s=150)  # scheduled first (tests/conftest.py)


@pytest.fixture(scope="module")
def killed_runs(tmp_path_factory) -> dict[str, dict]:
    return killed_runs_of(ARCHITECTURE_CASES, tmp_path_factory.mktemp("killed_architecture_runs"), steps=2)


@pytest.mark.parametrize("case", ARCHITECTURE_CASES)
def test_run_killed_after_a_checkpoint_resumes_exactly(case, killed_runs):
    check_resumed_exactly(killed_runs[case])
