"""The ``shapes_t2i`` procedural task: shapes-world prompt rows reachable from a config's data section."""

import pytest

from genalign.data.procedural import PROCEDURAL_TASKS
from genalign.data.shapes import parse_prompt, prompt_split, shapes_t2i_rows
from genalign.data.sources import DataSourceConfig, load_rows


def test_train_and_eval_map_to_the_shapes_world_splits():
    train = PROCEDURAL_TASKS.get("shapes_t2i")(64, 0, split="train")
    held_out = PROCEDURAL_TASKS.get("shapes_t2i")(64, 1, split="eval")
    assert len(train) == len(held_out) == 64
    assert {prompt_split(row["prompt"]) for row in train} == {"train"}
    assert {prompt_split(row["prompt"]) for row in held_out} == {"test"}
    assert not {row["prompt"] for row in train} & {row["prompt"] for row in held_out}


def test_rows_are_those_of_shapes_t2i_rows_with_targets():
    rows = PROCEDURAL_TASKS.get("shapes_t2i")(20, 3, split="eval", templates=["count"])
    assert rows == shapes_t2i_rows(20, 3, split="test", templates=("count",))
    for row in rows:
        assert row["template"] == "count"
        assert row["target"] == parse_prompt(row["prompt"])


def test_rows_are_a_pure_function_of_the_arguments():
    task = PROCEDURAL_TASKS.get("shapes_t2i")
    assert task(16, 5, split="train") == task(16, 5, split="train")
    assert task(16, 5, split="train") != task(16, 6, split="train")


def test_reachable_from_a_data_source_config():
    source = DataSourceConfig(source="procedural:shapes_t2i", args={"size": 8, "seed": 1, "split": "eval"})
    source.validate()
    rows = load_rows(source)
    assert len(rows) == 8 and all("target" in row for row in rows)


@pytest.mark.parametrize(
    ("kwargs", "message"), [({"split": "test"}, "split='test'"), ({"holdout_fraction": 1.5}, "1.5")]
)
def test_bad_arguments_name_the_value(kwargs, message):
    with pytest.raises(ValueError, match=message):
        PROCEDURAL_TASKS.get("shapes_t2i")(4, 0, **kwargs)
