"""Every preset under configs/ loads and validates, and fits the hardware it names (full-scale presets are checked and
planned, not run, on CPU); ``genalign validate``, which checks it against the option catalogue instead of the live
registries, resolves it to the same config."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from genalign.catalog.registries import catalogued_checks
from genalign.cli import main
from genalign.config import load_config, to_dict

pytestmark = pytest.mark.heavy(cpu_s=60)  # scheduled first (tests/conftest.py)

os.environ.setdefault("HF_HUB_OFFLINE", "1")
PRESETS = sorted((Path(__file__).resolve().parents[1] / "configs").glob("*.yaml"))


def test_there_are_presets():
    assert len(PRESETS) >= 4


@pytest.mark.parametrize("path", PRESETS, ids=lambda p: p.stem)
def test_preset_validates(path, capsys):
    config = load_config(path)
    assert config.rewards and config.policy.family
    with catalogued_checks():
        assert to_dict(load_config(path)) == to_dict(config)
    assert main(["validate", "--plan", str(path)]) == 0
    err = capsys.readouterr().err
    assert "valid" in err
    assert "WARNING" not in err, err  # a preset that names its hardware fits it (genalign plan)


def test_fast_flow_preset_is_the_race_recipe():
    """configs/demo_shapes_flow_fast.yaml is the flow race's ``chunk_ab2_8_lr6`` (the demo preset plus its overrides),
    so the measured result its header cites belongs to it."""
    import sys

    from genalign.config import to_dict

    root = Path(__file__).resolve().parents[1]
    sys.path.insert(0, str(root / "benchmarks"))
    from compare_methods import DEMOS

    flow = DEMOS["flow"]
    race = load_config(flow.preset, [*flow.methods["chunk_ab2_8_lr6"], *flow.shared])
    preset = load_config(root / "configs" / "demo_shapes_flow_fast.yaml", [f"run.output_dir={race.run.output_dir}"])
    assert to_dict(preset) == to_dict(race)
