"""Loading prompt rows from files and procedural sources; bad rows and columns give errors naming file, row, column."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from genalign.data import DataError, DataSourceConfig, load_rows

ROWS = [
    {"question": "1+1=", "solution": "2", "level": 1},
    {"question": "2+3=", "solution": "5", "level": 2},
    {"question": "4+4=", "solution": "8", "level": 1},
]
EXPECTED = [{"prompt": r["question"], "answer": r["solution"], "level": r["level"]} for r in ROWS]
MAPPING = {"prompt": "question", "answer": "solution"}


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def write_csv(path: Path, rows: list[dict]) -> Path:
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return path


def test_jsonl_with_column_mapping(tmp_path):
    source = write_jsonl(tmp_path / "data.jsonl", ROWS)
    assert load_rows(DataSourceConfig(source=str(source), columns=MAPPING), required=["answer"]) == EXPECTED


def test_json_list(tmp_path):
    source = tmp_path / "data.json"
    source.write_text(json.dumps(ROWS))
    assert load_rows(DataSourceConfig(source=str(source), columns=MAPPING)) == EXPECTED


def test_csv_values_are_strings_and_empty_cells_none(tmp_path):
    source = write_csv(tmp_path / "data.csv", ROWS)
    rows = load_rows(DataSourceConfig(source=str(source), columns=MAPPING))
    assert rows == [{**row, "level": str(row["level"])} for row in EXPECTED]


def test_chat_message_prompts_pass_through(tmp_path):
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "1+1="}]
    source = write_jsonl(tmp_path / "chat.jsonl", [{"prompt": messages, "answer": "2"}])
    assert load_rows(DataSourceConfig(source=str(source)))[0]["prompt"] == messages


def test_shuffle_and_limit_are_seeded(tmp_path):
    source = write_jsonl(tmp_path / "many.jsonl", [{"prompt": f"q{i}"} for i in range(20)])
    config = DataSourceConfig(source=str(source), shuffle=True, seed=1, limit=5)
    first = load_rows(config)
    assert len(first) == 5 and first == load_rows(config)
    assert [r["prompt"] for r in first] != [f"q{i}" for i in range(5)]


def test_procedural_source(tmp_path):
    config = DataSourceConfig(source="procedural:arithmetic", args={"size": 12, "seed": 5, "digits": 2})
    rows = load_rows(config, required=["answer"])
    assert len(rows) == 12 and rows == load_rows(config)
    assert all(eval(r["prompt"].rstrip("=")) == int(r["answer"]) for r in rows)


def test_missing_mapped_column_names_file_row_and_available_columns(tmp_path):
    rows = [dict(ROWS[0]), {"question": "2+3=", "level": 2}]
    source = write_jsonl(tmp_path / "data.jsonl", rows)
    with pytest.raises(DataError) as error:
        load_rows(DataSourceConfig(source=str(source), columns=MAPPING))
    message = str(error.value)
    assert "data.jsonl, line 2" in message and "'solution'" in message and "['level', 'question']" in message


def test_missing_required_column_suggests_mapping(tmp_path):
    source = write_jsonl(tmp_path / "data.jsonl", [{"prompt": "1+1=", "solution": "2"}])
    with pytest.raises(DataError, match=r"line 1: required column 'answer' is missing.*data\.columns\.answer"):
        load_rows(DataSourceConfig(source=str(source)), required=["answer"])


def test_missing_prompt_column(tmp_path):
    source = write_csv(tmp_path / "data.csv", [{"question": "1+1=", "answer": "2"}])
    with pytest.raises(DataError, match=r"data\.csv, line 2: required column 'prompt' is missing"):
        load_rows(DataSourceConfig(source=str(source)))


def test_null_value_in_required_column(tmp_path):
    source = write_jsonl(
        tmp_path / "data.jsonl", [{"prompt": "1+1=", "answer": "2"}, {"prompt": "2+2=", "answer": None}]
    )
    with pytest.raises(DataError, match=r"line 2, column 'answer': the value is empty"):
        load_rows(DataSourceConfig(source=str(source)), required=["answer"])


def test_empty_csv_cell_in_required_column(tmp_path):
    source = write_csv(tmp_path / "data.csv", [{"prompt": "1+1=", "answer": "2"}, {"prompt": "2+2=", "answer": ""}])
    with pytest.raises(DataError, match=r"data\.csv, line 3, column 'answer'"):
        load_rows(DataSourceConfig(source=str(source)), required=["answer"])


@pytest.mark.parametrize(
    ("prompt", "message"),
    [
        ("   ", "the prompt is empty"),
        (42, "got int 42"),
        ([{"role": "user"}], "chat message 0"),
    ],
)
def test_bad_prompt_values(tmp_path, prompt, message):
    source = write_jsonl(tmp_path / "data.jsonl", [{"prompt": "ok"}, {"prompt": prompt}])
    with pytest.raises(DataError, match=rf"line 2, column 'prompt': .*{message}"):
        load_rows(DataSourceConfig(source=str(source)))


def test_invalid_json_line(tmp_path):
    source = tmp_path / "data.jsonl"
    source.write_text('{"prompt": "a"}\n{"prompt": \n')
    with pytest.raises(DataError, match=r"data\.jsonl, line 2: invalid JSON"):
        load_rows(DataSourceConfig(source=str(source)))


def test_csv_row_with_extra_cells(tmp_path):
    source = tmp_path / "data.csv"
    source.write_text("prompt,answer\n1+1=,2\n2+2=,4,oops\n")
    with pytest.raises(DataError, match=r"line 3: more cells"):
        load_rows(DataSourceConfig(source=str(source)))


def test_missing_file_names_the_path(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"nope\.jsonl"):
        load_rows(DataSourceConfig(source=str(tmp_path / "nope.jsonl")))


@pytest.mark.parametrize(
    ("config", "message"),
    [
        (DataSourceConfig(), "data.source is empty"),
        (DataSourceConfig(source="data.txt"), "unsupported file type '.txt'"),
        (
            DataSourceConfig(source="procedural:arithmatic", args={"size": 3}),
            "Did you mean 'procedural:arithmetic'|'arithmetic'",
        ),
        (DataSourceConfig(source="procedural:arithmetic"), r"data\.args\.size=None"),
        (
            DataSourceConfig(source="procedural:arithmetic", args={"size": 3, "digit": 2}),
            r"data\.args\.digit: unknown argument.*Did you mean 'digits'",
        ),
        (DataSourceConfig(source="x.jsonl", args={"size": 3}), "only applies to procedural"),
        (DataSourceConfig(source="x.jsonl", columns={"prompt": 3}), r"data\.columns\.prompt=3"),
        (DataSourceConfig(source="x.jsonl", limit=0), r"data\.limit=0"),
    ],
)
def test_config_validation_names_field_and_fix(config, message):
    with pytest.raises(ValueError, match=message):
        config.validate()


def test_parquet(tmp_path):
    pyarrow = pytest.importorskip("pyarrow")
    import pyarrow.parquet as parquet

    source = tmp_path / "data.parquet"
    parquet.write_table(pyarrow.Table.from_pylist(ROWS), source)
    assert load_rows(DataSourceConfig(source=str(source), columns=MAPPING)) == EXPECTED


def test_datasets_folder(tmp_path):
    datasets = pytest.importorskip("datasets")
    datasets.DatasetDict({"train": datasets.Dataset.from_list(ROWS)}).save_to_disk(str(tmp_path / "ds"))
    assert load_rows(DataSourceConfig(source=str(tmp_path / "ds"), columns=MAPPING)) == EXPECTED
    with pytest.raises(DataError, match="holds splits"):
        load_rows(DataSourceConfig(source=str(tmp_path / "ds"), columns=MAPPING, split="test"))


def test_parquet_without_pyarrow_says_what_to_install(tmp_path, monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_pyarrow(name, *args, **kwargs):
        if name.startswith("pyarrow"):
            raise ImportError("no pyarrow")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_pyarrow)
    source = tmp_path / "data.parquet"
    source.write_bytes(b"PAR1")
    with pytest.raises(ImportError, match="pip install pyarrow"):
        load_rows(DataSourceConfig(source=str(source)))
