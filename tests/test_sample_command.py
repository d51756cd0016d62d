"""`genalign sample`: seeded samples with their rewards, identical across calls; the base model beside the checkpoint;
image grids; rewards loaded only with --score, and one that cannot be loaded named."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from genalign.cli import main
from genalign.config import load_config
from genalign.environments import calculator
from genalign.sample_command import mp4_encoder, write_video
from tests import prepared_python

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
ARITH = ROOT / "configs" / "demo_arith_grpo.yaml"


@pytest.fixture(scope="module")
def arith_run(tmp_path_factory) -> Path:
    """The arith demo LM after one GRPO step (configs/demo_arith_grpo.yaml, run.max_steps=1)."""
    from genalign.trainer import train

    out = tmp_path_factory.mktemp("arith") / "run"
    overrides = [f"run.output_dir={out}", "run.max_steps=1", "run.progress_bar=false", "run.num_threads=1",
                 "eval.at_start=false", "eval.num_prompts=8", "run.sample_every=0"]  # fmt: skip
    train(load_config(ARITH, overrides))
    return out


def sample(*args: str) -> subprocess.CompletedProcess:
    return prepared_python.run([sys.executable, "-m", "genalign.cli", "sample", *args], env=ENV, cwd=ROOT,
                          capture_output=True, text=True, timeout=300)  # fmt: skip


def test_scored_samples_are_identical_across_two_calls(arith_run):
    first, second = (sample(str(arith_run), "--score", "--seed", "0", "--num", "8") for _ in range(2))
    assert first.returncode == 0, first.stderr[-2000:]
    assert first.stdout == second.stdout
    lines = [json.loads(line) for line in first.stdout.splitlines()]
    assert len(lines) == 4 * 8 and [line["sample"] for line in lines[:8]] == list(range(8))  # 4 held-out prompts
    assert all(line["rewards"]["accuracy"] in (0.0, 1.0) for line in lines)
    assert {line["checkpoint"] for line in lines} == {str(arith_run / "checkpoints" / "step-1")}
    assert all(line["output"] == line["output"].strip() for line in lines)
    mean = sum(line["rewards"]["accuracy"] for line in lines) / len(lines)
    assert f"mean rewards of the samples (32): accuracy {mean:.4g}" in first.stderr


def test_compare_base_prints_two_columns_for_text(arith_run, capsys):
    assert main(["sample", str(arith_run), "--compare", "base", "--score", "--num", "2", "--num-prompts", "1"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert len(lines) == 2 and all(set(line) >= {"base", "trained", "prompt", "sample"} for line in lines)
    assert set(lines[0]["base"]) == {"output", "rewards"} and set(lines[0]["trained"]["rewards"]) == {"accuracy"}


def test_a_multi_turn_sample_is_scored_with_its_environment_reward(capsys):
    """The rows scored are the rollout's, which carry the episode's environment_reward (the tool-use demo's model)."""
    preset = ROOT / "configs" / "demo_tool_calculator_grpo.yaml"
    assert main(["sample", str(preset), "--checkpoint", "none", "--score", "--num-prompts", "4"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert len(lines) == 4 and all(line["rewards"]["accuracy"] in (0.0, 1.0) for line in lines)
    for line in lines:  # the environment's reward: the final answer of the transcript is the exact result
        expression, answer = line["prompt"].split("What is ")[1].split("?")[0], line["output"].rsplit("Answer: ", 1)
        expected = float(len(answer) == 2 and answer[1] == calculator(expression))
        assert line["rewards"]["accuracy"] == expected and line["rewards"]["tool_calls"] == line["output"].count(
            "<tool_call>"
        )


def test_rewards_are_loaded_only_with_score_and_a_missing_one_is_named(tmp_path, capsys):
    config = yaml.safe_load(ARITH.read_text())
    config["rewards"].append({"fn": "moved_away.py:digits", "weight": 0.0})
    config["run"]["output_dir"] = str(tmp_path / "run")
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    assert main(["sample", str(path), "--checkpoint", "none", "--num-prompts", "1"]) == 0
    assert json.loads(capsys.readouterr().out)["checkpoint"] == "base model"
    assert main(["sample", str(path), "--checkpoint", "none", "--num-prompts", "1", "--score"]) == 2
    err = capsys.readouterr().err
    assert "rewards[1] 'digits'" in err and "moved_away.py" in err and "drop --score" in err


def test_sampler_flags_are_checked_against_the_family(tmp_path, capsys):
    assert main(["sample", str(ARITH), "--checkpoint", "none", "--steps", "4"]) == 2
    assert "--steps 4: policy.family 'causal_lm' has no num_steps or eval_num_steps" in capsys.readouterr().err
    assert main(["sample", str(ARITH), "--checkpoint", "none", "--temperature", "-1"]) == 2
    assert "policy.temperature" in capsys.readouterr().err


def test_images_come_with_a_grid_of_prompts_by_samples(tmp_path, capsys):
    from PIL import Image

    out = tmp_path / "samples"
    args = ["sample", "configs/demo_shapes_flow_grpo.yaml", "run.num_threads=1", "--checkpoint", "none", "--num", "2",
            "--num-prompts", "2", "--score", "--out", str(out)]  # fmt: skip
    assert main(args) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [Path(line["output"]).name for line in lines] == [f"sample-{i}.png" for i in range(4)]
    assert set(lines[0]["rewards"]) == {"partial", "accuracy", "accuracy_with_kinds"}
    grid = Image.open(out / "grid.png")
    single = Image.open(out / "sample-0.png")
    assert grid.width >= 2 * 4 * single.width and grid.height >= 2 * 4 * single.height  # 2 x 2 cells, upscaled 4x
    assert (out / "samples.jsonl").read_text().splitlines() == [json.dumps(line) for line in lines]


def test_a_video_is_written_as_frames_and_as_mp4_when_an_encoder_is_installed(tmp_path):
    frames = np.zeros((3, 16, 16, 3), dtype=np.uint8)
    frames[1, :, :, 0] = 255
    written = write_video(frames, tmp_path, "sample-0", fps=4)
    assert sorted(p.name for p in (tmp_path / "sample-0").iterdir()) == ["frame-000.png", "frame-001.png",
                                                                         "frame-002.png"]  # fmt: skip
    assert ("mp4" in written) == (mp4_encoder() is not None)
