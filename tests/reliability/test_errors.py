"""Bad input is reported with the field, the value and the fix, before anything is loaded or written; nothing from a
checkpoint is ever executed by `genalign eval` or `genalign sample`."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import pytest
import torch
import yaml

from genalign.assets import model_location
from genalign.config import from_dict
from genalign.config.schema import TrainConfig
from genalign.trainer.recipe import build_policy

ROOT = Path(__file__).resolve().parents[2]
FAMILIES = {
    "causal_lm": {"family": "causal_lm"},
    "vlm": {"family": "vlm"},
    "diffusion_lm": {"family": "diffusion_lm"},
    "flow": {"family": "flow", "height": 32, "width": 32},
}


def family_config(family: str, model: str) -> TrainConfig:
    return from_dict(TrainConfig, {
        "policy": FAMILIES[family] | {"model": model},
        "data": {"train": {"source": "procedural:arithmetic", "args": {"size": 8}}},
        "rewards": [{"fn": "exact_match"}],
    })  # fmt: skip


@pytest.mark.parametrize("family", list(FAMILIES))
def test_a_missing_or_empty_model_folder_names_the_field_and_the_fix(family, tmp_path):
    with pytest.raises(FileNotFoundError, match=r"policy\.model='.*nowhere' does not exist.*local folder"):
        build_policy(family_config(family, str(tmp_path / "nowhere")), torch.device("cpu"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match=r"policy\.model='.*empty' is an empty folder"):
        build_policy(family_config(family, str(tmp_path / "empty")), torch.device("cpu"))
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "weights.bin").write_bytes(b"")
    marker = "model_index.json" if family == "flow" else "config.json"
    with pytest.raises(FileNotFoundError, match=rf"holds no {marker}"):
        build_policy(family_config(family, str(tmp_path / "other")), torch.device("cpu"))


def test_hub_ids_pass_through_and_builtins_resolve(monkeypatch):
    assert model_location("builtin:arith-lm").endswith("assets/arith-lm")
    for variable in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        monkeypatch.delenv(variable, raising=False)
    assert model_location("Qwen/Qwen2.5-0.5B") == "Qwen/Qwen2.5-0.5B"
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # offline, a hub id that is not cached fails at once, with the fix
    with pytest.raises(FileNotFoundError, match=r"policy\.model='nobody/nothing'.*not in the local cache.*HF_HUB_OFFLINE"
                       r"=1.*huggingface-cli download nobody/nothing"):  # fmt: skip
        model_location("nobody/nothing")


def test_a_builtin_of_another_family_names_the_missing_file():
    with pytest.raises(FileNotFoundError, match=r"policy\.model='builtin:arith-lm' holds no model_index\.json.*family"):
        model_location("builtin:arith-lm", marker="model_index.json")


class Payload:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (open, (str(self.marker), "w"))


def test_eval_and_sample_never_unpickle_checkpoint_files(tmp_path, capsys):
    """Through the CLI's entry point in this process (an unpickled payload would create its marker here as well)."""
    from genalign.cli import main

    config = {
        "policy": {"family": "causal_lm", "model": "builtin:arith-lm", "max_new_tokens": 4},
        "data": {"train": {"source": "procedural:arithmetic", "args": {"size": 32, "digits": 2}},
                 "eval": {"source": "procedural:arithmetic", "args": {"size": 4, "digits": 2, "split": "eval"}}},
        "rewards": [{"fn": "exact_match"}],
        "algorithm": {"group_size": 2, "prompts_per_step": 2, "micro_batch_size": 4},
        "eval": {"at_start": False, "num_prompts": 4},
        "run": {"output_dir": str(tmp_path / "run"), "max_steps": 1, "progress_bar": False},
    }  # fmt: skip
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    assert main(["train", str(path)]) == 0
    checkpoint = tmp_path / "run" / "checkpoints" / "step-1"
    marker = tmp_path / "pwned"
    for name in ("optimizer.pt", "rng.pt", "policy_state.pt", "trainer_extra.pt", "policy/extra.pt"):
        (checkpoint / name).write_bytes(pickle.dumps(Payload(marker)))
    for command in (["eval", str(path)], ["sample", str(path), "--prompt", "1+2=", "--checkpoint", str(checkpoint)]):
        capsys.readouterr()
        assert main(command) == 0, capsys.readouterr().err[-2000:]
    assert not marker.exists()
    assert json.loads((tmp_path / "run" / "eval.json").read_text())["checkpoint"] == str(checkpoint)
