"""Every preset under configs/ loads and validates, and fits the hardware it names (full-scale presets are checked and
planned, not run, on CPU)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from genalign.cli import main
from genalign.config import load_config

os.environ.setdefault("HF_HUB_OFFLINE", "1")
PRESETS = sorted((Path(__file__).resolve().parents[1] / "configs").glob("*.yaml"))


def test_there_are_presets():
    assert len(PRESETS) >= 4


@pytest.mark.parametrize("path", PRESETS, ids=lambda p: p.stem)
def test_preset_validates(path, capsys):
    config = load_config(path)
    assert config.rewards and config.policy.family
    assert main(["validate", str(path)]) == 0
    err = capsys.readouterr().err
    assert "valid" in err
    assert "WARNING" not in err, err  # a preset that names its hardware fits it (genalign plan)
