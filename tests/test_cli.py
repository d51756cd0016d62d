"""The command line is discoverable: --version, `list`, presets in `train --help`; `sample` finds the run's checkpoint
and checks its arguments before loading a model."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from genalign import __version__
from genalign.catalog import KINDS, listing
from tests import prepared_python

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT)}


def cli(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return prepared_python.run([sys.executable, "-m", "genalign.cli", *args], env=ENV, cwd=cwd, capture_output=True,
                          text=True, timeout=300)  # fmt: skip


def test_version_and_train_help_list_presets():
    assert cli("--version").stdout.strip() == f"genalign {__version__}"
    help_text = cli("train", "--help").stdout
    assert "presets (configs/):" in help_text and "demo_arith_grpo.yaml" in help_text


@pytest.mark.parametrize("kind", KINDS)
def test_every_kind_lists_names_with_a_summary(kind):
    rows = listing(kind)
    assert rows and all(name and text for name, text in rows), kind


def test_list_shows_registered_options_sources_and_families():
    rewards = dict(listing("rewards"))
    assert {"exact_match", "math_equivalence", "code_execution", "geneval_shapes"} <= set(rewards)
    credit = dict(listing("credit"))
    assert "[170] BranchGRPO" in credit["tree"] and "needs prefix_tree" in credit["tree"]
    assert "experimental" in dict(listing("clips"))["icepop"]
    families = dict(listing("families"))
    assert set(families) >= {"causal_lm", "diffusion_lm", "flow", "vlm"} and "vocab_term" in families["causal_lm"]
    out = cli("list", "objectives")
    assert out.returncode == 0 and "clipped_ratio" in out.stdout and "nft" in out.stdout


def test_sample_checks_its_arguments_before_loading_a_model(tmp_path, capsys, monkeypatch):
    """Through the CLI's entry point in this process."""
    from genalign.cli import main

    monkeypatch.chdir(ROOT)
    started = time.perf_counter()
    code = main(["sample", "configs/demo_shapes_flow_grpo.yaml", "--prompt", "two red circles", "--checkpoint", "none"])
    assert code == 2 and "pass --out FOLDER" in capsys.readouterr().err
    code = main(
        ["sample", "configs/demo_arith_grpo.yaml", "--prompt", "1+1=", "--image", "x.png", "--checkpoint", "none"]
    )
    assert code == 2 and "--image is for policies that take images" in capsys.readouterr().err
    assert time.perf_counter() - started < 60  # no model was loaded


def test_sample_and_eval_default_to_the_runs_latest_checkpoint_and_accept_a_run_folder(tmp_path, capsys):
    """Training runs in its own process; ``sample`` and ``eval`` run through the CLI's entry point in this one (their
    checkpoint resolution is the subject, not a process boundary)."""
    from genalign.cli import main

    config = yaml.safe_load((ROOT / "configs" / "demo_arith_grpo.yaml").read_text())
    config["run"] |= {"output_dir": str(tmp_path / "run"), "max_steps": 2, "save_every": 1, "progress_bar": False,
                      "num_threads": 1}  # fmt: skip
    config["eval"] |= {"at_start": False, "every": 0, "num_prompts": 8}
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    assert cli("train", str(path)).returncode == 0
    latest = str(tmp_path / "run" / "checkpoints" / "step-2")

    def run(*args: str) -> str:
        capsys.readouterr()
        code = main(list(args))
        out, err = capsys.readouterr()
        assert code == 0, err[-2000:]
        return out

    for checkpoint in ([], ["--checkpoint", "latest"], ["--checkpoint", str(tmp_path / "run")]):
        out = run("sample", str(path), "--prompt", "12+30=", *checkpoint)
        assert json.loads(out.splitlines()[0])["checkpoint"] == latest
    base = json.loads(run("sample", str(path), "--prompt", "12+30=", "--checkpoint", "none"))
    assert base["checkpoint"] == "base model"
    assert json.loads(run("eval", str(path)))["checkpoint"] == latest


def test_list_into_a_closed_pipe_stops_quietly():
    """`genalign list | head`: the reader closes the pipe early; no traceback, as Unix tools do."""
    command = f"{sys.executable} -m genalign list | true"
    for _ in range(3):  # `true` may exit before or after the first write
        done = subprocess.run(["bash", "-c", command], cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=60)
        assert "Traceback" not in done.stderr and "BrokenPipe" not in done.stderr, done.stderr
