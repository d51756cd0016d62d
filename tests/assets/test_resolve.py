"""resolve(): built-in names and local paths, never a hub."""

from __future__ import annotations

import pytest

from genalign.assets import ASSETS_DIR, available_builtins, resolve


def test_builtin_resolves_to_the_asset_folder():
    assert "arith-lm" in available_builtins()
    assert resolve("builtin:arith-lm") == ASSETS_DIR / "arith-lm"


def test_unknown_builtin_lists_the_available_ones():
    with pytest.raises(
        FileNotFoundError, match=r"unknown built-in asset 'builtin:arith-llm'.*'arith-lm'.*builtin:arith-lm"
    ):
        resolve("builtin:arith-llm")
    with pytest.raises(FileNotFoundError, match=r"Available: .*builtin:arith-lm"):
        resolve("builtin:")


def test_existing_path_is_returned(tmp_path):
    assert resolve(str(tmp_path)) == tmp_path


def test_hub_id_is_a_missing_path_not_a_download():
    with pytest.raises(FileNotFoundError, match=r"'Qwen/Qwen2.5-0.5B' does not exist.*never downloads"):
        resolve("Qwen/Qwen2.5-0.5B")
