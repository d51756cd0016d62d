"""The statistics of ``benchmarks/opd_vs_grpo.py`` on hand-computed values: steps and seconds to a target, the paired
difference to GRPO and its verdict, and the check that every method of a seed saw the same prompts at every step
(its ``--smoke`` runs in tests/benchmarks/test_smoke.py)."""

from __future__ import annotations

import importlib.util
import json
import math
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


@pytest.fixture
def opd(monkeypatch):
    """The script as a module; ``sys.path`` and the benchmark modules it imports by name are put back afterwards."""
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    before = set(sys.modules)
    spec = importlib.util.spec_from_file_location("opd_vs_grpo_under_test", BENCHMARKS / "opd_vs_grpo.py")
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)  # its dataclass looks its module up there
    spec.loader.exec_module(module)
    yield module
    for name in set(sys.modules) - before:
        file = getattr(sys.modules[name], "__file__", None)
        if file is not None and Path(file).resolve().parent == BENCHMARKS:
            del sys.modules[name]


def test_first_reaching_is_the_first_evaluation_at_the_target(opd):
    by_step = [(0, 0.31), (1, 0.85), (2, 0.90), (3, 0.88), (4, 0.96)]
    assert opd.first_reaching(by_step, 0.90) == 2  # the first point >= target, not the last crossing
    assert opd.first_reaching(by_step, 0.95) == 4
    assert opd.first_reaching(by_step, 0.97) == math.inf
    by_time = [(0.0, 0.31), (2.5, 0.85), (5.25, 0.90)]
    assert opd.first_reaching(by_time, 0.90) == 5.25


def test_paired_difference_uses_the_seeds_where_both_reached(opd):
    # per-seed differences where both are finite: 5 - 6 = -1, 7 - 10 = -3 -> mean -2, sd sqrt(2), SE sqrt(2)/sqrt(2) = 1
    mean, se, n = opd.paired_difference([5, 7, math.inf, 4], [6, 10, 8, math.inf])
    assert (mean, n) == (-2.0, 2) and se == pytest.approx(1.0)
    assert opd.paired_difference([3], [5]) == (-2.0, 0.0, 1)


def test_verdict_needs_two_standard_errors(opd):
    assert opd.verdict(-2.0, 1.0, 2, "fewer", "more") == "within 2 SE"  # exactly 2 SE is not beyond
    assert opd.verdict(-2.1, 1.0, 2, "fewer", "more") == "fewer"
    assert opd.verdict(2.1, 1.0, 3, "fewer", "more") == "more"
    assert opd.verdict(-5.0, 0.0, 1, "fewer", "more") == "too few seeds"


def _dump(folder: Path, step: int, prompts: list[str]) -> None:
    """A step's sample dump: every prompt twice (a group of 2), as the trainer writes it."""
    (folder / "samples").mkdir(parents=True, exist_ok=True)
    records = [{"step": step, "index": i, "prompt": p, "reward": 1.0, "output": "1"} for i, p in enumerate(prompts)]
    (folder / "samples" / f"step-{step}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))


def test_prompt_check_names_the_differing_step(opd, tmp_path: Path):
    for method in ("grpo", "opd"):
        _dump(opd.run_dir(tmp_path, method, 0), 1, ["1+2=", "1+2=", "3+4=", "3+4="])
    _dump(opd.run_dir(tmp_path, "grpo", 0), 2, ["5+6=", "5+6="])
    _dump(opd.run_dir(tmp_path, "opd", 0), 2, ["7+8=", "7+8="])
    assert opd.step_prompts(opd.run_dir(tmp_path, "grpo", 0)) == {1: ["1+2=", "3+4="], 2: ["5+6="]}
    compared, mismatches = opd.prompt_mismatches(tmp_path, ["grpo", "opd"], [0])
    assert compared == 2 and mismatches == ["seed 0 step 2: opd differ from grpo"]
