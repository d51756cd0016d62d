"""`python tests/policies/run_contract.py train CONFIG k=v ...`: the genalign CLI with the contract test's reward.

`python tests/policies/run_contract.py --each COMMANDS.json`: every command of the JSON list (each a list of CLI
arguments) in turn in this one process, their exit codes written back into the file as ``{"codes": [...]}`` (the
contract test's uninterrupted and resumed runs of every case: one process start instead of one per case).
"""

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import tests.policies.contract_reward  # noqa: F401  (registers the reward)
from genalign.cli import main


def each(commands_file: Path) -> int:
    codes = []
    for arguments in json.loads(commands_file.read_text()):
        try:
            codes.append(main(arguments))
        except SystemExit as stop:
            codes.append(stop.code if isinstance(stop.code, int) else 1)
        except Exception:  # reported, and the next command still runs
            import traceback

            traceback.print_exc()
            codes.append(1)
    commands_file.write_text(json.dumps({"codes": codes}))
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["--each"]:
        raise SystemExit(each(Path(sys.argv[2])))
    raise SystemExit(main(sys.argv[1:]))
