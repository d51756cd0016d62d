"""Config checks read the live registries, or inside ``catalogued_checks`` (``genalign validate``) the catalogue;
``genalign validate`` of a preset and ``genalign list`` then import neither torch nor a model library."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from genalign.algorithms import OBJECTIVES
from genalign.algorithms.signals import declared
from genalign.catalog.registries import catalogued, catalogued_checks, declared_signals, options, signals_by
from genalign.catalog.store import CataloguedRegistry

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("torch", "transformers", "diffusers")


def test_options_are_the_live_registry_unless_catalogued():
    assert options("objectives") is OBJECTIVES and not catalogued()
    with catalogued_checks():
        assert catalogued() and isinstance(options("objectives"), CataloguedRegistry)
        assert signals_by("score", ["entropy", "mask", "no_such_signal"]) == {"entropy"}
    assert not catalogued()


def test_the_catalogued_signals_are_the_declared_ones():
    with catalogued_checks():
        catalogued_facts = {name: (s.producer, s.needs_rewards) for name, s in declared_signals().items()}
    assert catalogued_facts == {name: (s.producer, s.needs_rewards) for name, s in declared().items()}


def test_validate_and_list_import_no_heavy_library():
    """In a fresh process (this one has torch): a full-scale preset is validated and every kind listed."""
    script = (
        "import contextlib, io, sys\n"
        "from genalign.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):\n"
        "    codes = [main(['validate', 'configs/dapo_qwen2.5.yaml']), main(['list'])]\n"
        f"print(codes, [name for name in {HEAVY!r} if name in sys.modules])\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    out = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == "[0, 0] []", out.stdout + out.stderr[-2000:]
