"""`python tests/policies/run_contract.py train CONFIG k=v ...`: the genalign CLI with the contract test's reward."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import tests.policies.contract_reward  # noqa: F401  (registers the reward)
from genalign.cli import main

if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
