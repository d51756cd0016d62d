"""``math_verify_equivalence``: math-verify runs only in the sandbox, graded as TRL's ``accuracy_reward``, a stuck pair
costs its own time limit, and a missing install is a clear error. Tests that run math-verify skip where it is not
installed (``pip install 'genalign[math]'``) or where the sandbox's unprivileged uid cannot read it."""

from __future__ import annotations

import ast
import importlib.util
import inspect
import os
import sys
import time

import pytest

from genalign.rewards import REWARDS
from genalign.rewards.math_answers import math_verify_grader
from genalign.rewards.math_answers.math_verify_grader import (
    MathVerifyEquivalence,
    math_verify_available,
    math_verify_outcomes,
    math_verify_paths,
)
from genalign.rewards.sandbox import SandboxError
from genalign.rewards.sandbox.interpreter import reachable_by_others

linux = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the sandbox needs Linux")


def _unusable() -> str | None:
    if not math_verify_available():
        return "math-verify is not installed: pip install 'genalign[math]'"
    if os.geteuid() == 0 and not all(reachable_by_others(path) for path in math_verify_paths()):
        return "math-verify's folder is not readable by the sandbox's unprivileged uid"
    return None


needs_math_verify = pytest.mark.skipif(_unusable() is not None, reason=_unusable() or "")


def test_the_caller_never_imports_math_verify():
    """No import of math-verify or its parser in the grader module: the library only ever loads in the sandbox."""
    tree = ast.parse(inspect.getsource(math_verify_grader))
    imported = {
        alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names
    }
    imported |= {
        node.module.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module
    }
    assert not imported & {"math_verify", "latex2sympy2_extended", "antlr4", "sympy"}


def test_registered_and_rejects_bad_arguments_by_name():
    assert REWARDS.get("math_verify_equivalence") is MathVerifyEquivalence
    for kwargs, name in [({"timeout_s": 0}, "timeout_s"), ({"batch_size": 0}, "batch_size"),
                         ({"memory_mb": 64}, "memory_mb"), ({"wrap_gold": "yes"}, "wrap_gold")]:  # fmt: skip
        with pytest.raises(ValueError, match=name):
            MathVerifyEquivalence(**kwargs)


def test_without_math_verify_construction_names_the_install_command(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None if name == "math_verify" else real(name))
    assert not math_verify_available()
    with pytest.raises(ImportError, match=r"genalign\[math\]"):
        MathVerifyEquivalence()


@linux
def test_a_sandbox_that_cannot_import_math_verify_is_a_sandbox_error(monkeypatch):
    monkeypatch.setattr(math_verify_grader, "math_verify_paths", lambda: ("/",))  # readable, holds no math-verify
    with pytest.raises(SandboxError, match="could not be imported in the sandbox"):
        math_verify_outcomes([("1", "\\boxed{1}")])


@linux
@needs_math_verify
def test_grades_as_trl_does_and_every_batch_runs_in_the_sandbox(monkeypatch):
    runs = []
    real = math_verify_grader.run_sandboxed

    def recording(program, **kwargs):
        runs.append(kwargs)
        return real(program, **kwargs)

    monkeypatch.setattr(math_verify_grader, "run_sandboxed", recording)
    reward = MathVerifyEquivalence(batch_size=3)
    completions = ["so $\\boxed{0.5}$", "\\boxed{\\frac{1}{3}}", "no answer here", "\\boxed{(1, 2)}", "\\boxed{3}"]
    answers = ["\\frac{1}{2}", "\\frac{1}{2}", "7", "(1, 2)", None]
    assert reward([""] * 5, completions, answer=answers) == [1.0, 0.0, 0.0, 1.0, None]
    metrics = reward.pop_metrics()
    assert metrics["scored"] == 4.0 and metrics["no_answer"] == 1.0 and metrics["bad_answer"] == 1.0
    assert len(runs) == 2  # 4 scored rows in batches of 3
    # TRL parses a bare gold answer as it is: math-verify then reads "(1, 2)" as 2
    assert math_verify_outcomes([("(1, 2)", "\\boxed{2}")], wrap_gold=False) == ["equal"]


@linux
@needs_math_verify
def test_a_stuck_pair_costs_its_own_time_limit_and_the_batch_goes_on():
    started = time.perf_counter()
    pairs = [("2", "$\\boxed{10^{10^{10}}}$"), ("3", "\\boxed{3}")]  # sympy's big power does not return in time
    assert math_verify_outcomes(pairs, timeout_s=1.0) == ["timeout", "equal"]
    assert time.perf_counter() - started < 15.0
