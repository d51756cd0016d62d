"""``genalign export`` (issue 14, Must show): tiny models trained for 2 steps through the real trainer are exported, the
folders load without genalign and generate what genalign generates from the same checkpoint.

* causal LM: the merged folder (``AutoModelForCausalLM.from_pretrained``), the adapter folder
  (``PeftModel.from_pretrained``) and a fully fine-tuned run's folder give token for token the policy's greedy
  completions (``policy.top_k = 1``) under transformers' greedy ``generate``;
* flow: ``load_lora_weights`` into the base pipeline, and the merged pipeline folder, give the policy's ODE evaluation
  images for a fixed seed. CFG-free (guidance 1, as the demo), diffusers' ``__call__`` runs the same float32 Euler
  steps as genalign (tests/policies/test_interop.py). diffusers encodes the four prompts as one batch and genalign
  each prompt alone (an embedding must not depend on the batch it was encoded in, or a resumed run would not
  reproduce the uninterrupted one), and the text encoders round differently by batch size: measured, the LoRA file's
  images differ from genalign's by 1 uint8 level in 1 of 12288 values; the merged pipeline's latents differ from the
  unmerged LoRA's by at most 1.8e-6 besides (``(W + s B A) x`` rounds differently from ``W x + s B (A x)``), so one
  level is allowed (``MAX_LEVELS``) for a pixel on a rounding boundary; the base model's images differ from genalign's
  by up to 18 levels in 79 % of the pixels, so the comparison sees the trained weights.

Errors name the argument, the value and the fix; a failed write leaves ``OUT`` as it was.
"""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import argparse
import json
import re
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

import tests.policies.contract_reward  # noqa: F401  (registers the reward the runs' configs name)
from genalign.config import from_dict
from genalign.config.schema import TrainConfig
from genalign.data import load_rows
from genalign.export import ExportError, add_export_arguments, export, run_export
from genalign.runs import load_policy, open_run_or_checkpoint
from genalign.trainer import train
from tests.policies.contract_cases import case_config

torch.set_num_threads(1)
FLOW_PROMPTS = ["two red circles", "one blue square", "three green triangles", "a red circle above a blue square"]
#: the largest difference in uint8 levels diffusers' images may show from genalign's (measured: 1; module docstring)
MAX_LEVELS = 1


def _train(tmp_path_factory, case: str, name: str, policy: dict, lr: float) -> Path:
    """A run of ``case`` trained for 2 steps (one inner epoch) with ``policy`` overrides; returns its folder."""
    run = tmp_path_factory.mktemp(name) / "run"
    config = case_config(case, str(run))
    config["policy"] |= policy
    config["optim"]["lr"] = lr  # large enough for 2 steps to change greedy completions and images visibly
    config["run"] |= {"max_steps": 2, "save_every": 0}
    config["algorithm"] |= {"inner_epochs": 1, "minibatches": 1}
    torch.manual_seed(0)
    train(from_dict(TrainConfig, config))
    return run


@pytest.fixture(scope="module")
def lm_lora_run(tmp_path_factory) -> Path:
    return _train(tmp_path_factory, "causal_lm", "lm_lora", {"lora": {"rank": 4, "alpha": 8.0}}, lr=0.05)


@pytest.fixture(scope="module")
def lm_full_run(tmp_path_factory) -> Path:
    return _train(tmp_path_factory, "causal_lm", "lm_full", {}, lr=0.01)


@pytest.fixture(scope="module")
def flow_run(tmp_path_factory) -> Path:
    """LoRA rank 4 with an EMA of the weights (decay 0.5), which the policy's evaluation samples with."""
    return _train(tmp_path_factory, "flow_sde", "flow", {"train_steps": {"strategy": "all"}}, lr=0.03)


# ---- causal LM ---------------------------------------------------------------------------------------------------------
def _genalign_greedy(run: Path):
    """The policy of ``run``'s checkpoint sampling greedily (top_k = 1) on 16 held-out-style prompts."""
    config, checkpoint = open_run_or_checkpoint(str(run), argument="run")
    config.policy.top_k = 1  # a sampling setting only: the weights are the checkpoint's
    policy = load_policy(config, checkpoint)
    rows = load_rows(config.data.train)[:16]
    return policy, policy.rollout(rows, 1, mode="eval")


def _hf_greedy_matches(model, folder: Path, rollout) -> list[bool]:
    """Per row: transformers' greedy ``generate`` with the folder's generation config gives the rollout's tokens,
    then only padding."""
    from transformers import GenerationConfig

    generation = GenerationConfig.from_pretrained(folder)
    generation.do_sample = False
    data = rollout.per_sample
    with torch.no_grad():
        out = model.eval().generate(
            input_ids=data["prompt_ids"], attention_mask=data["prompt_mask"], generation_config=generation
        )
    completions = out[:, data["prompt_ids"].shape[1] :]
    matches = []
    for row, ids, mask in zip(completions, data["completion_ids"], data["completion_mask"], strict=True):
        length = int(mask.sum())
        rest = row[length:].tolist()
        matches.append(row[:length].tolist() == ids[:length].tolist() and set(rest) <= {generation.pad_token_id})
    return matches


@pytest.mark.parametrize("merge", [True, False], ids=["merged", "adapter"])
def test_lm_lora_export_generates_the_policys_greedy_completions(lm_lora_run, tmp_path, merge):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    result = export(lm_lora_run, tmp_path / "out", merge_lora=merge)
    policy, rollout = _genalign_greedy(lm_lora_run)
    base = AutoModelForCausalLM.from_pretrained(policy.model_path)
    if merge:
        assert not (tmp_path / "out" / "adapter_config.json").exists()
        model = AutoModelForCausalLM.from_pretrained(tmp_path / "out")  # plain transformers, no peft
    else:
        adapter = json.loads((tmp_path / "out" / "adapter_config.json").read_text())
        assert adapter["base_model_name_or_path"] == policy.model_path
        model = PeftModel.from_pretrained(base, tmp_path / "out")
    assert all(_hf_greedy_matches(model, tmp_path / "out", rollout))
    untrained = AutoModelForCausalLM.from_pretrained(policy.model_path)
    assert not all(_hf_greedy_matches(untrained, tmp_path / "out", rollout)), "training must change completions"
    assert ("LoRA merged" in result.written) == merge
    card = (tmp_path / "out" / "README.md").read_text()
    assert ("PeftModel.from_pretrained" in card) != merge


def test_fully_fine_tuned_lm_export_loads_with_transformers_and_generates_the_same(lm_full_run, tmp_path):
    from transformers import AutoModelForCausalLM

    checkpoint = next((lm_full_run / "checkpoints").iterdir())  # a checkpoint folder works as well as the run
    export(checkpoint, tmp_path / "out")
    _, rollout = _genalign_greedy(lm_full_run)
    assert all(_hf_greedy_matches(AutoModelForCausalLM.from_pretrained(tmp_path / "out"), tmp_path / "out", rollout))
    with pytest.raises(ExportError, match="--merge-lora: this run trained every weight"):
        export(lm_full_run, tmp_path / "merged", merge_lora=True)


def test_dtype_casts_the_written_weights(lm_lora_run, tmp_path):
    from transformers import AutoModelForCausalLM

    export(lm_lora_run, tmp_path / "bf16", merge_lora=True, dtype="bfloat16")
    assert json.loads((tmp_path / "bf16" / "config.json").read_text())["dtype"] == "bfloat16"
    assert {t.dtype for t in load_file(tmp_path / "bf16" / "model.safetensors").values()} == {torch.bfloat16}
    assert AutoModelForCausalLM.from_pretrained(tmp_path / "bf16").dtype == torch.bfloat16


# ---- flow --------------------------------------------------------------------------------------------------------------
def _images(outputs) -> np.ndarray:
    return np.stack([np.asarray(image) for image in outputs]).astype(np.int16)  # [N, H, W, 3]


def _genalign_ode_images(run: Path) -> np.ndarray:
    """The policy's evaluation rollout (ODE, EMA weights) of ``FLOW_PROMPTS`` from seed 7."""
    config, checkpoint = open_run_or_checkpoint(str(run), argument="run")
    policy = load_policy(config, checkpoint)
    policy.model.generator.manual_seed(7)
    with torch.no_grad(), policy.evaluation_weights():  # as `genalign sample` and the trainer's evaluation
        return _images(policy.rollout([{"prompt": p} for p in FLOW_PROMPTS], 1, mode="eval").outputs)


def _diffusers_images(pipe, run: Path) -> np.ndarray:
    config, _ = open_run_or_checkpoint(str(run), argument="run")
    c = config.policy
    pipe.set_progress_bar_config(disable=True)
    settings = dict(num_inference_steps=c.eval_num_steps, guidance_scale=c.guidance_scale, height=c.height,
                    width=c.width, max_sequence_length=c.max_sequence_length)  # fmt: skip
    return _images(pipe(FLOW_PROMPTS, generator=torch.Generator().manual_seed(7), **settings).images)


def _base_pipeline():
    from diffusers import DiffusionPipeline

    from genalign.assets import model_location
    from genalign.pipelines.flow import _absent_components

    base = Path(model_location("builtin:shapes-t2i-faded", marker="model_index.json"))
    return DiffusionPipeline.from_pretrained(base, **_absent_components(base))


@pytest.mark.parametrize("merge", [False, True], ids=["lora_file", "merged_pipeline"])
def test_flow_export_gives_genalign_ode_images_in_diffusers(flow_run, tmp_path, merge):
    from diffusers import DiffusionPipeline

    out = tmp_path / "out"
    export(flow_run, out, merge_lora=merge, ema=True)  # the EMA weights: what genalign's evaluation samples with
    ours = _genalign_ode_images(flow_run)
    base = _base_pipeline()
    untrained = _diffusers_images(base, flow_run)
    if merge:
        assert not (out / "pytorch_lora_weights.safetensors").exists()
        pipe = DiffusionPipeline.from_pretrained(out, text_encoder_3=None, tokenizer_3=None)  # SD3 without T5
        assert not any("lora" in name for name, _ in pipe.transformer.named_parameters())
        assert np.abs(_diffusers_images(pipe, flow_run) - ours).max() <= MAX_LEVELS
    else:
        assert sorted(p.name for p in out.iterdir()) == ["README.md", "pytorch_lora_weights.safetensors"]
        base.load_lora_weights(out)
        assert np.abs(_diffusers_images(base, flow_run) - ours).max() <= MAX_LEVELS
    difference = np.abs(untrained - ours)
    assert difference.max() >= 5 and (difference > 0).mean() > 0.3, "training must change the images"


def test_flow_export_without_ema_writes_the_trained_lora_weights(flow_run, tmp_path):
    export(flow_run, tmp_path / "out")
    checkpoint = next((flow_run / "checkpoints").iterdir())
    trained = load_file(checkpoint / "policy" / "pytorch_lora_weights.safetensors")
    exported = load_file(tmp_path / "out" / "pytorch_lora_weights.safetensors")
    assert trained.keys() == exported.keys() and all(torch.equal(trained[k], exported[k]) for k in trained)


# ---- arguments and atomicity ------------------------------------------------------------------------------------------
def _command(*argv: str) -> int:
    parser = argparse.ArgumentParser(prog="genalign export")
    add_export_arguments(parser)
    return run_export(parser.parse_args(list(argv)))


def test_errors_name_the_argument_the_value_and_the_fix(lm_lora_run, tmp_path, capsys):
    cases = [
        ((str(tmp_path / "missing"), str(tmp_path / "a")), "RUN_OR_CHECKPOINT .*missing: no such folder"),
        ((str(tmp_path), str(tmp_path / "b")), "neither a run folder .* give OUTPUT_DIR"),
        ((str(lm_lora_run), str(lm_lora_run)), "OUT .*not empty; give a new folder, or pass --overwrite"),
        ((str(lm_lora_run), str(tmp_path / "c"), "--ema"), "--ema: the causal_lm policy .* drop --ema"),
    ]
    (tmp_path / "empty_run").mkdir()
    (tmp_path / "empty_run" / "config.yaml").write_text((lm_lora_run / "config.yaml").read_text())
    cases.append(((str(tmp_path / "empty_run"), str(tmp_path / "d")), "no complete checkpoint yet"))
    for argv, message in cases:
        assert _command(*argv) == 2
        assert re.search(message, capsys.readouterr().err), argv
    with pytest.raises(SystemExit):  # argparse names --dtype, the value and the choices
        _command(str(lm_lora_run), str(tmp_path / "e"), "--dtype", "fp8")
    assert "argument --dtype: invalid choice: 'fp8'" in capsys.readouterr().err
    assert not any(p.name.startswith(".") for p in tmp_path.iterdir()), "no temporary folder left behind"


def test_a_failed_write_leaves_out_as_it_was(lm_lora_run, tmp_path, monkeypatch):
    import genalign.export.command as command

    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("previous export")

    def broken(policy):
        def write(policy, folder, **_):
            (folder / "partial.bin").write_bytes(b"x")
            raise OSError("disk full")

        return write

    monkeypatch.setattr(command, "_writer", broken)
    with pytest.raises(OSError, match="disk full"):
        export(lm_lora_run, out, overwrite=True)
    assert [p.name for p in tmp_path.iterdir()] == ["out"] and [p.name for p in out.iterdir()] == ["keep.txt"]
    monkeypatch.undo()
    assert _command(str(lm_lora_run), str(out), "--overwrite") == 0
    assert not (out / "keep.txt").exists() and (out / "adapter_model.safetensors").exists()
