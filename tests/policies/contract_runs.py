"""Runs of the adapter contract's kill-and-resume test, shared by its two modules (the families' cases in
tests/policies/test_contract.py, the flow architecture matrix in tests/policies/test_contract_architectures.py, so
that the two halves train on different test processes): each case's uninterrupted reference run, a run killed by
SIGKILL inside step 3 and its resume."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import torch
import yaml
from safetensors.torch import load_file

from tests import prepared_python
from tests.policies.contract_cases import case_config

ROOT = Path(__file__).resolve().parents[2]
RUNNER = ROOT / "tests" / "policies" / "run_contract.py"


def run(config_path: Path, *overrides: str, kill_at_call: int | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    if kill_at_call is not None:
        env["GENALIGN_TEST_KILL_AT_CALL"] = str(kill_at_call)
    return prepared_python.run(
        [sys.executable, str(RUNNER), "train", str(config_path), *overrides],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip


def records(run_dir: Path) -> list[dict]:
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return [{k: v for k, v in json.loads(line).items() if not k.startswith("time/")} for line in lines]


def final_weights(run_dir: Path, step: int) -> dict[str, torch.Tensor]:
    folder = run_dir / "checkpoints" / f"step-{step}" / "policy"
    return {f"{path.name}/{k}": v for path in sorted(folder.rglob("*.safetensors")) for k, v in load_file(path).items()}


def run_each(commands: list[list[str]], folder: Path) -> tuple[list[int], str]:
    """``commands`` (CLI argument lists) one after the other in one runner process: their exit codes, its stderr."""
    folder.mkdir()
    listing = folder / "commands.json"
    listing.write_text(json.dumps(commands))
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    proc = prepared_python.run([sys.executable, str(RUNNER), "--each", str(listing)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=1800)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(listing.read_text())["codes"], proc.stderr


def killed_runs_of(cases: list[str], root: Path, *, steps: int = 4) -> dict[str, dict]:
    """Per case: the uninterrupted reference run of ``steps`` steps with a checkpoint every ``steps / 2``, a run killed
    inside step ``steps / 2 + 1`` (after that checkpoint) and its resume. The references of all ``cases`` train in
    one process, then each killed run in its own, then the resumes in one process."""
    runs: dict[str, dict] = {}
    for case in cases:
        folder = root / case
        folder.mkdir()
        config = folder / "config.yaml"
        sections = case_config(case, str(folder / "reference"))
        sections["run"] |= {"max_steps": steps, "save_every": steps // 2}
        config.write_text(yaml.safe_dump(sections))
        runs[case] = {"config": config, "reference": folder / "reference", "killed": folder / "killed", "steps": steps}
    codes, stderr = run_each([["train", str(r["config"])] for r in runs.values()], root / "references")
    for r, code in zip(runs.values(), codes, strict=True):
        r["reference_code"], r["reference_stderr"] = code, stderr
    for r in runs.values():
        r["killed_proc"] = run(r["config"], f"run.output_dir={r['killed']}", kill_at_call=steps // 2 + 1)
        r["steps_logged_when_killed"] = [record["step"] for record in records(r["killed"])]
    resumes = [["train", str(r["config"]), f"run.output_dir={r['killed']}", "run.resume=latest"] for r in runs.values()]
    codes, stderr = run_each(resumes, root / "resumes")
    for r, code in zip(runs.values(), codes, strict=True):
        r["resumed_code"], r["resumed_stderr"] = code, stderr
    return runs


def check_resumed_exactly(r: dict) -> None:
    """The killed run died by SIGKILL inside step ``steps / 2 + 1`` (its reward call), after the checkpoint of step
    ``steps / 2``, and ``run.resume=latest`` finished it (in another process) with the reference's metrics and
    weights."""
    assert r["reference_code"] == 0, r["reference_stderr"][-3000:]
    killed = r["killed_proc"]
    assert killed.returncode == -signal.SIGKILL, (killed.returncode, killed.stderr[-3000:])
    assert r["steps_logged_when_killed"] == list(range(1, r["steps"] // 2 + 1))
    assert r["resumed_code"] == 0, r["resumed_stderr"][-3000:]
    assert records(r["killed"]) == records(r["reference"]), "metrics after the resume differ"
    expected, got = final_weights(r["reference"], r["steps"]), final_weights(r["killed"], r["steps"])
    assert expected.keys() == got.keys() and all(torch.equal(expected[k], got[k]) for k in expected)
