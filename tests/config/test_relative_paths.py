"""One rule for relative paths (genalign/config/paths.py): in a config file they are read from the file's folder,
whatever folder genalign runs from; on the command line (``key=value`` overrides) and in a config built in Python they
are the working directory's. What is not a path (a scheme, a hub id, ``latest``) is left as written."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from genalign.config import from_dict, load_config
from genalign.config.paths import paths_from_config_file
from genalign.config.schema import TrainConfig
from genalign.policies.lm.tiny import build_tiny_causal_lm

REWARD_FILE = """
def says_answer(prompts, completions, answer, **columns):
    return [float(a in c) for c, a in zip(completions, answer)]
"""


def project(root: Path) -> Path:
    """``root/project``: configs/run.yaml naming ../models/tiny, ../data/train.jsonl, ../rewards/mine.py and
    ../runs/r, all relative to configs/."""
    base = root / "project"
    build_tiny_causal_lm(base / "models" / "tiny", vocab_size=96)
    (base / "data").mkdir()
    rows = [{"prompt": f"{a} + 1 =", "answer": str(a + 1)} for a in range(4)]
    (base / "data" / "train.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    (base / "rewards").mkdir()
    (base / "rewards" / "mine.py").write_text(REWARD_FILE)
    config = {
        "policy": {"family": "causal_lm", "model": "../models/tiny", "max_new_tokens": 2},
        "data": {"train": {"source": "../data/train.jsonl"}},
        "rewards": [{"fn": "../rewards/mine.py:says_answer"}],
        "algorithm": {"group_size": 2, "prompts_per_step": 2, "micro_batch_size": 4},
        "eval": {"at_start": False},
        "run": {"output_dir": "../runs/r", "max_steps": 1, "progress_bar": False, "num_threads": 1},
    }
    (base / "configs").mkdir()
    (base / "configs" / "run.yaml").write_text(yaml.safe_dump(config))
    return base


def test_a_config_in_a_subfolder_trains_from_another_folder(tmp_path, monkeypatch):
    from genalign.cli import main

    base = project(tmp_path)
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    config = load_config("../project/configs/run.yaml")
    assert config.policy.model == str(base / "models" / "tiny")
    assert config.data.train.source == str(base / "data" / "train.jsonl")
    assert config.rewards[0].fn == f"{base / 'rewards' / 'mine.py'}:says_answer"
    assert config.run.output_dir == str(base / "runs" / "r")
    assert main(["train", "../project/configs/run.yaml"]) == 0
    saved = yaml.safe_load((base / "runs" / "r" / "config.yaml").read_text())  # the run's own config: absolute
    assert saved["data"]["train"]["source"] == str(base / "data" / "train.jsonl") and saved["run"]["output_dir"] == "."
    assert not (tmp_path / "elsewhere" / "runs").exists()


def test_overrides_and_python_configs_are_relative_to_the_working_directory(tmp_path, monkeypatch):
    base = project(tmp_path)
    monkeypatch.chdir(tmp_path)
    overridden = load_config(base / "configs" / "run.yaml", ["data.train.source=mine.jsonl", "run.output_dir=out"])
    assert (overridden.data.train.source, overridden.run.output_dir) == ("mine.jsonl", "out")
    raw = yaml.safe_load((base / "configs" / "run.yaml").read_text())
    raw["rewards"] = [{"fn": "exact_match"}]
    assert from_dict(TrainConfig, raw).data.train.source == "../data/train.jsonl"  # no file: as written


def test_what_is_not_a_path_is_left_as_written(tmp_path):
    folder = tmp_path / "configs"
    folder.mkdir()
    raw = {
        "policy": {"family": "causal_lm", "model": "Qwen/Qwen2.5-0.5B", "tokenizer": "../tokenizers/mine"},
        "data": {"train": {"source": "procedural:arithmetic"}, "eval": {"source": "hf:openai/gsm8k"}},
        "run": {"output_dir": "/abs/run", "resume": "latest"},
    }
    paths_from_config_file(raw, folder / "run.yaml", TrainConfig)
    assert raw["policy"] == {"family": "causal_lm", "model": "Qwen/Qwen2.5-0.5B",  # a hub id
                             "tokenizer": str(tmp_path / "tokenizers" / "mine")}  # fmt: skip
    assert (
        raw["data"]["train"]["source"] == "procedural:arithmetic" and raw["data"]["eval"]["source"] == "hf:openai/gsm8k"
    )
    assert raw["run"] == {"output_dir": "/abs/run", "resume": "latest"}
    raw = {"algorithm": {"teacher": {"source": "model", "model": "../runs/t/policy", "tokenizer": "Qwen/Qwen2.5-0.5B"}}}
    paths_from_config_file(raw, folder / "run.yaml", TrainConfig)  # the teacher's folders are paths like the policy's
    assert raw["algorithm"]["teacher"] == {"source": "model", "model": str(tmp_path / "runs" / "t" / "policy"),
                                           "tokenizer": "Qwen/Qwen2.5-0.5B"}  # fmt: skip
    (folder / "Qwen" / "Qwen2.5-0.5B").mkdir(parents=True)  # a folder next to the config is that folder
    raw = {"policy": {"family": "causal_lm", "model": "Qwen/Qwen2.5-0.5B"}, "run": {"resume": "../runs/r/checkpoints"}}
    paths_from_config_file(raw, folder / "run.yaml", TrainConfig)
    assert raw["policy"]["model"] == str(folder / "Qwen" / "Qwen2.5-0.5B")
    assert raw["run"]["resume"] == str(tmp_path / "runs" / "r" / "checkpoints")


def test_code_files_and_declared_reward_path_arguments_are_read_from_the_config_folder(tmp_path):
    folder = tmp_path / "configs"
    weights = str(tmp_path / "weights" / "pick")
    pick = {"model_path": "../weights/pick", "device": "cuda"}
    raw = {
        "policy": {"family": "causal_lm", "multi_turn": {"environments": {"name": "tools",
                                                                          "tools": ["calculator", "my_tools.py:count"]}}},
        "rewards": [
            {"fn": "pickscore", "args": dict(pick)},
            {"fn": "caption_view", "args": {"reward": "pickscore", "reward_args": dict(pick)}},
            {"fn": "weighted_sum", "args": {"rewards": {"pickscore": {"weight": 1.0, "args": dict(pick)}}}},
            {"fn": "environment", "args": {"fallback": {"fn": "pickscore", "args": dict(pick)}}},
            {"fn": "self_verification", "args": {"solution_reward": "pickscore", "solution_args": dict(pick)}},
            {"fn": "sub/mine.py:score", "args": {"model_path": "../weights/pick"}},  # a file's args: as written
        ],
    }  # fmt: skip
    paths_from_config_file(raw, folder / "run.yaml", TrainConfig)
    assert raw["policy"]["multi_turn"]["environments"]["tools"] == ["calculator", f"{folder / 'my_tools.py'}:count"]
    rewards = raw["rewards"]
    assert rewards[0]["args"] == {"model_path": weights, "device": "cuda"}
    assert rewards[1]["args"]["reward_args"]["model_path"] == weights
    assert rewards[2]["args"]["rewards"]["pickscore"]["args"]["model_path"] == weights
    assert rewards[3]["args"]["fallback"]["args"]["model_path"] == weights
    assert rewards[4]["args"]["solution_args"]["model_path"] == weights
    assert rewards[5] == {"fn": f"{folder / 'sub' / 'mine.py'}:score", "args": {"model_path": "../weights/pick"}}
