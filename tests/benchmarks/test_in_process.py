"""tests/benchmarks/in_process.py: a script run in the test process sees its command line, its folder first on
``sys.path`` and its working folder, reports its exit status and output, and leaves the process as it found it
(threads, generators, ``sys.path``, environment, working folder, the benchmark modules it imported by name), also when
it raises."""

from __future__ import annotations

import os
import random
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.benchmarks.in_process import BENCHMARKS, run_script

#: a script that changes every piece of process-wide state run_script puts back, then exits with ``EXIT``
SCRIPT = textwrap.dedent(
    f"""
    import os, random, sys
    import numpy as np, torch
    print(__name__, sys.argv[1:], os.getcwd(), sys.path[0])
    sys.path.insert(0, {str(BENCHMARKS)!r})
    import bench_flow  # a benchmark imported by name, as bench_flow_trees does
    os.environ["GENALIGN_IN_PROCESS_PROBE"] = "set"
    os.chdir("/")
    torch.set_num_threads(3)
    torch.manual_seed(1), random.seed(1), np.random.seed(1)
    print("to stderr", file=sys.stderr)
    EXIT
    """
)


def _state() -> tuple:
    return (
        torch.get_num_threads(), list(sys.path), dict(os.environ), os.getcwd(), "bench_flow" in sys.modules,
        torch.get_rng_state().tolist(), random.getstate(), np.random.get_state()[1].tolist(),
    )  # fmt: skip


def test_exit_status_output_and_the_process_put_back(tmp_path: Path):
    script = tmp_path / "changes_everything.py"
    script.write_text(SCRIPT.replace("EXIT", "raise SystemExit(3)"))
    before = _state()
    done = run_script(str(script), ["--smoke", "--out", "x"], cwd=tmp_path)
    assert done.returncode == 3
    assert done.stdout == f"__main__ ['--smoke', '--out', 'x'] {tmp_path} {tmp_path}\n" and done.stderr == "to stderr\n"
    assert _state() == before


def test_an_exception_propagates_after_the_output_and_the_process_is_put_back(tmp_path: Path, capsys):
    script = tmp_path / "fails.py"
    script.write_text(SCRIPT.replace("EXIT", "raise ValueError('bad input')"))
    before = _state()
    with pytest.raises(ValueError, match="bad input"):
        run_script(str(script), [], cwd=tmp_path)
    assert _state() == before
    shown = capsys.readouterr()
    assert shown.out == f"__main__ [] {tmp_path} {tmp_path}\n" and shown.err == "to stderr\n"
