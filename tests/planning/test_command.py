"""``genalign plan`` exit codes and output, and the hardware warning of ``genalign validate``."""

from __future__ import annotations

import os

from genalign.cli import main

os.environ.setdefault("HF_HUB_OFFLINE", "1")
DEMO = "configs/demo_arith_grpo.yaml"


def test_plan_exits_0_when_it_fits(capsys):
    assert main(["plan", DEMO, "--gpus", "1", "--gpu-memory", "80"]) == 0
    out = capsys.readouterr().out
    assert "FITS" in out and "optimizer state" in out and "assumptions:" in out


def test_plan_exits_1_with_suggestions_when_it_does_not_fit(capsys):
    assert main(["plan", DEMO, "--gpus", "1", "--gpu-memory", "1.05"]) == 1  # 1 GB of CUDA context alone
    out = capsys.readouterr().out
    assert "DOES NOT FIT" in out and "to make it fit" in out


def test_plan_takes_the_hardware_section_and_exits_2_without_one(capsys):
    assert main(["plan", DEMO, "hardware.gpus=1", "hardware.gpu_memory_gb=80"]) == 0
    assert main(["plan", DEMO]) == 2
    assert "--gpus (hardware.gpus)" in capsys.readouterr().err


def test_validate_plan_warns_about_hardware_too_small_but_still_passes(capsys):
    assert main(["validate", "--plan", DEMO, "hardware.gpus=1", "hardware.gpu_memory_gb=1.05"]) == 0
    err = capsys.readouterr().err
    assert "valid" in err and "WARNING" in err and "hardware.gpu_memory_gb = 1.05" in err
    assert main(["validate", "--plan", DEMO, "hardware.gpus=1", "hardware.gpu_memory_gb=80"]) == 0
    assert "WARNING" not in capsys.readouterr().err


def test_validate_without_plan_says_the_hardware_was_not_planned(capsys):
    assert main(["validate", DEMO, "hardware.gpus=1", "hardware.gpu_memory_gb=1.05"]) == 0
    err = capsys.readouterr().err
    assert "WARNING" not in err and f"genalign validate --plan {DEMO}" in err
