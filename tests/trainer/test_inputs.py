"""genalign.train from Python, as TRL is used: rows (a datasets.Dataset, a list or an iterable of dicts) and reward
callables passed to the call, the config leaving them out, one validation; the rows' fingerprint in the saved config
and a resume that refuses other rows; TRL's conversational reward convention."""

from __future__ import annotations

import pytest
import yaml

import genalign
from genalign.config import ConfigError
from genalign.data import DataError
from genalign.policies import FAMILY_MODULES
from genalign.trainer.run_directory import RunDirectoryError
from tests.trainer.toy_policy import toy_rows

FAMILY_MODULES["toy"] = "tests.trainer.toy_policy"
CALLS: list[dict] = []


def letters(prompts, completions, answer, **columns):
    return [sum(a == b for a, b in zip(c, r, strict=False)) / 3 for c, r in zip(completions, answer, strict=True)]


def only_odd(prompts, completions, pid, **columns):
    return [1.0 if p % 2 else None for p in pid]  # None: not applicable to even prompts


def chat_reward(prompts, completions, answer, completion_text, **columns):
    CALLS.append({"prompt": prompts[0], "completion": completions[0], "text": completion_text[0]})
    return [float(m[0]["content"] == r) for m, r in zip(completions, answer, strict=True)]


def config(tmp_path, **run) -> dict:
    return {
        "policy": {"family": "toy", "num_prompts": 8, "layout_free_sampling": True},
        "algorithm": {"group_size": 2, "prompts_per_step": 2, "micro_batch_size": 4},
        "eval": {"at_start": False},
        "run": {"output_dir": str(tmp_path / "run"), "max_steps": 2, "progress_bar": False, **run},
    }


def test_a_dataset_and_callables_train_without_data_or_rewards_in_the_config(tmp_path):
    from datasets import Dataset

    rows = toy_rows(8)
    result = genalign.train(
        config(tmp_path),
        train_dataset=Dataset.from_list(rows),
        eval_dataset=iter(rows[:4]),
        rewards=[letters, only_odd],
    )
    assert result["eval/num_prompts"] == 4 and "eval/reward/only_odd" in result
    saved = yaml.safe_load((tmp_path / "run" / "config.yaml").read_text())
    assert saved["data"]["train"]["source"].startswith("python:rows=8,sha256=")
    assert saved["data"]["eval"]["source"].startswith("python:rows=4,sha256=")
    assert [r["fn"] for r in saved["rewards"]] == [f"{__name__}:letters", f"{__name__}:only_odd"]
    assert saved["run"]["output_dir"] == "."


def test_a_resume_gets_the_same_rows_and_refuses_other_rows(tmp_path):
    rows = toy_rows(8)
    genalign.train(config(tmp_path, save_every=1), train_dataset=rows, rewards=[letters])
    with pytest.raises(RunDirectoryError, match=r"other data.train rows .* pass the same train_dataset"):
        genalign.train(config(tmp_path, max_steps=3, resume="latest"), train_dataset=rows[::-1], rewards=[letters])
    saved = tmp_path / "run" / "config.yaml"  # the saved config, with the same rows passed again
    result = genalign.train(config(tmp_path, max_steps=3, resume="latest"), train_dataset=rows, rewards=[letters])
    assert result["step"] == 3
    with pytest.raises(DataError, match=r"passed to genalign.train\(\) from Python .* train_dataset="):
        genalign.train(saved, rewards=[letters], train_dataset=None)


def test_conversational_rows_give_rewards_message_lists_and_the_text(tmp_path):
    rows = [{**row, "prompt": [{"role": "user", "content": row["prompt"]}]} for row in toy_rows(8)]
    CALLS.clear()
    genalign.train(config(tmp_path, max_steps=1), train_dataset=rows, rewards=[chat_reward, "toy_letter_match"])
    call = CALLS[0]
    assert call["prompt"] == [{"role": "user", "content": call["prompt"][0]["content"]}]
    assert call["completion"] == [{"role": "assistant", "content": call["text"]}] and isinstance(call["text"], str)


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"train_dataset": "rows.jsonl"}, DataError, r"train_dataset: expected a datasets.Dataset.*data.train.source"),
        ({"train_dataset": [{"prompt": "a"}, {"question": "b"}]}, DataError, r"train_dataset, row 1 \(0-based\)"),
        ({"train_dataset": toy_rows(2), "rewards": letters}, ConfigError, r"rewards= takes a list"),
        ({"train_dataset": toy_rows(2), "rewards": [42]}, ConfigError, r"rewards\[0\]: 42 is not a reward"),
        ({"train_dataset": toy_rows(2)}, ConfigError, r"rewards: empty.*rewards=\[my_reward\]"),
        ({"rewards": [letters]}, ConfigError, r"data.train.source is empty.*train_dataset="),
    ],
)
def test_bad_inputs_are_named_with_the_fix(tmp_path, kwargs, error, message):
    with pytest.raises(error, match=message):
        genalign.train(config(tmp_path), **kwargs)
    assert not (tmp_path / "run").exists()


def test_a_source_in_the_config_and_a_dataset_are_not_both_taken(tmp_path):
    both = config(tmp_path) | {"data": {"train": {"source": "rows.jsonl"}}}
    with pytest.raises(ConfigError, match=r"data.train.source = 'rows.jsonl' and train_dataset= are both given"):
        genalign.train(both, train_dataset=toy_rows(2), rewards=[letters])


def test_columns_of_the_config_map_the_dataset(tmp_path):
    rows = [{"question": row["prompt"], "pid": row["pid"], "answer": row["answer"]} for row in toy_rows(8)]
    mapped = config(tmp_path) | {"data": {"train": {"columns": {"prompt": "question"}}}}
    assert genalign.train(mapped, train_dataset=rows, rewards=[letters])["step"] == 2
