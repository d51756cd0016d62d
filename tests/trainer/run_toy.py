"""`python tests/trainer/run_toy.py train CONFIG k=v ...`: the genalign CLI with the test-only 'toy' policy family.

Used by tests that need a real process boundary (crash + resume, `accelerate launch --num_processes 2`).
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from genalign.cli import main
from genalign.policies import FAMILY_MODULES

FAMILY_MODULES["toy"] = "tests.trainer.toy_policy"

if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
