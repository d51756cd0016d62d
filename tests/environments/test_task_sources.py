"""The multi-turn task families are procedural data sources under their own names, row for row the same."""

from __future__ import annotations

import pytest

from genalign.data import PROCEDURAL_TASKS, DataSourceConfig, load_rows
from genalign.environments.tasks import TASKS


@pytest.mark.parametrize("name", ["calculator_arithmetic", "lookup", "guess_number"])
def test_a_task_family_is_a_procedural_source(name):
    assert PROCEDURAL_TASKS.get(name) is TASKS.get(name)
    config = DataSourceConfig(source=f"procedural:{name}", args={"size": 5, "seed": 2, "split": "eval"})
    config.validate()
    rows = load_rows(config)
    expected = TASKS.get(name)(5, 2, split="eval")
    assert [{k: v for k, v in row.items() if k in expected[0]} for row in rows] == expected
    assert all(row["env"] == name for row in rows)


def test_a_wrong_argument_names_the_task_and_the_valid_ones():
    config = DataSourceConfig(source="procedural:calculator_arithmetic", args={"size": 5, "digit": 3})
    with pytest.raises(ValueError, match=r"data.args.digit: unknown argument.*Did you mean 'digits'"):
        config.validate()
