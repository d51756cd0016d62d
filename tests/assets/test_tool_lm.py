"""The tool-use demo model ``builtin:tool-lm`` loads offline, its chat template is prefix-preserving, greedy decoding
of a task prompt writes a calculator call that the environment parses and runs, and its preset
(configs/demo_tool_calculator_grpo.yaml) validates and trains a step (see the model's MODEL_CARD.md)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from genalign.assets import resolve  # noqa: E402
from genalign.config import load_config  # noqa: E402
from genalign.environments import EnvironmentSet, ModelTurn, calculator, parse_tool_calls  # noqa: E402
from genalign.environments.tasks import calculator_arithmetic  # noqa: E402
from genalign.policies.lm.chat_turns import ChatRenderer  # noqa: E402
from genalign.policies.lm.tokenizer import load_tokenizer  # noqa: E402
from genalign.trainer import train  # noqa: E402

PRESET = Path(__file__).resolve().parents[2] / "configs" / "demo_tool_calculator_grpo.yaml"


@pytest.fixture(scope="module")
def demo():
    path = resolve("builtin:tool-lm")
    model = transformers.AutoModelForCausalLM.from_pretrained(path).eval()
    return model, load_tokenizer(str(path))


def test_files_are_small_and_the_template_is_prefix_preserving(demo):
    path = resolve("builtin:tool-lm")
    for name in ["config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json", "MODEL_CARD.md"]:
        assert (path / name).is_file(), name
    assert (path / "model.safetensors").stat().st_size < 8 * 2**20
    _, tokenizer = demo
    renderer = ChatRenderer(tokenizer)
    renderer.check()  # raises TemplateNotPrefixPreserving otherwise
    assert renderer.end_of_turn_ids() == (tokenizer.eos_token_id,) == (tokenizer.convert_tokens_to_ids("<|im_end|>"),)


def test_greedy_decoding_writes_a_calculator_call_the_environment_runs(demo):
    model, tokenizer = demo
    rows = [r for r in calculator_arithmetic(16, seed=3, split="eval", digits=4, operators="+*") if "*" in r["prompt"]]
    environments, renderer = EnvironmentSet("calculator_arithmetic"), ChatRenderer(tokenizer)
    rows = rows[:4]
    prompts = []
    for row in rows:
        episode = environments.start(row)
        messages = renderer.prompt_messages(row["prompt"], episode.observation, 0)
        prompts.append(renderer.render(messages, episode.tool_schemas, generation_prompt=True))
    encoded = tokenizer(prompts, return_tensors="pt", padding=True, add_special_tokens=False)
    with torch.no_grad():
        output = model.generate(**encoded, max_new_tokens=48, do_sample=False, pad_token_id=tokenizer.pad_token_id,
                                eos_token_id=tokenizer.eos_token_id)  # fmt: skip
    turns = tokenizer.batch_decode(output[:, encoded["input_ids"].shape[1] :], skip_special_tokens=True)
    exact = 0
    for row, turn in zip(rows, turns, strict=True):
        content, calls = parse_tool_calls(turn)
        assert content == "" and len(calls) == 1, turn  # the whole turn is one call
        call = calls[0]
        assert call.error is None and call.name == "calculator" and set(call.arguments) == {"expression"}, turn
        exact += call.arguments["expression"] == row["expression"]
        result = environments.start(row).environment.step(ModelTurn(turn))
        assert result.record.counts["ok"] == 1 and not result.done
        assert result.messages()[0]["content"] == calculator(call.arguments["expression"])
    assert exact >= 3, turns  # the operands are copied (the model card: greedy copies are almost always right)


def test_the_preset_validates_and_trains_one_step(tmp_path, monkeypatch):
    monkeypatch.setattr(
        "genalign.trainer.recipe.refresh_dashboard", lambda out: None
    )  # matplotlib: seconds, not checked
    config = load_config(
        PRESET,
        [
            f"run.output_dir={tmp_path / 'run'}", "run.max_steps=1", "run.progress_bar=false", "run.num_threads=1",
            "run.save_every=0", "run.sample_every=0", "algorithm.prompts_per_step=2", "algorithm.group_size=4",
            "algorithm.micro_batch_size=8", "eval.num_prompts=4", "eval.batch_size=4", "eval.at_start=false", "data.train.args.size=64",
        ],
    )  # fmt: skip
    assert config.policy.multi_turn.enabled and config.policy.model == "builtin:tool-lm"
    result = train(config)
    assert result["eval/num_scored"] == 4 and 0.0 <= result["eval/accuracy"] <= 1.0
    assert result["eval/reward/tool_calls"] >= 0.0 and result["eval/reward/tool_errors"] >= 0.0
    assert result["eval/rollout/trajectories"] == 4  # the held-out rollouts' counters, summed over the evaluation
    assert result["eval/reward/tool_calls"] * 4 == result["eval/rollout/tools/calls"]
    record = json.loads((tmp_path / "run" / "metrics.jsonl").read_text().splitlines()[0])
    assert record["rollout/trajectories"] == 8 and record["rollout/turns"] >= 8
    assert record["rollout/tools/calls"] == record["rollout/tools/ok"] + sum(
        record[f"rollout/tools/{kind}"] for kind in ("bad_json", "unknown_tool", "bad_arguments", "tool_error",
                                                     "timeout", "too_large", "too_many_calls")
    )  # fmt: skip
    assert record["reward/tool_calls/mean"] * 8 == record["rollout/tools/calls"]
