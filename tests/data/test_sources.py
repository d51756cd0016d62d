"""Loading prompt rows from files and procedural sources; bad rows and columns give errors naming file, row, column."""

from __future__ import annotations

import csv
import json
import time
from pathlib import Path

import pytest

from genalign.config import from_dict
from genalign.config.schema import DataConfig
from genalign.data import DataError, DataSourceConfig, load_rows
from genalign.data.errors import LOCATION_KEY, row_location
from genalign.errors import UserPathError

ROWS = [
    {"question": "1+1=", "solution": "2", "level": 1},
    {"question": "2+3=", "solution": "5", "level": 2},
    {"question": "4+4=", "solution": "8", "level": 1},
]
EXPECTED = [{"prompt": r["question"], "answer": r["solution"], "level": r["level"]} for r in ROWS]
MAPPING = {"prompt": "question", "answer": "solution"}


def load(config: DataSourceConfig, **kwargs) -> list[dict]:
    """The rows' columns, without the location load_rows records in each (tested on its own)."""
    return [{k: v for k, v in row.items() if k != LOCATION_KEY} for row in load_rows(config, **kwargs)]


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
    assert load(DataSourceConfig(source=str(source), columns=MAPPING), required=["answer"]) == EXPECTED


def test_json_list(tmp_path):
    source = tmp_path / "data.json"
    source.write_text(json.dumps(ROWS))
    assert load(DataSourceConfig(source=str(source), columns=MAPPING)) == EXPECTED


def test_csv_values_are_strings_and_empty_cells_none(tmp_path):
    source = write_csv(tmp_path / "data.csv", ROWS)
    rows = load(DataSourceConfig(source=str(source), columns=MAPPING))
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
    data = from_dict(DataConfig, {"train": {"source": str(tmp_path / "nope.jsonl")}})
    with pytest.raises(UserPathError, match=r"^data\.train\.source: '.*nope\.jsonl' does not exist"):
        load_rows(data.train)


@pytest.mark.parametrize(
    ("name", "content", "where"),
    [
        ("data.jsonl", b'{"prompt": "a"}\n\n{"prompt": "b\xff"}\n', r"data\.jsonl, line 3: not UTF-8 text \(byte 0xff at "
         r"column 14\)"),
        ("data.csv", b"prompt,answer\n1+1=,2\n\xfe+1=,2\n", r"data\.csv, line 3: not UTF-8 text \(byte 0xfe at column 1\)"),
        ("data.json", b'[{"prompt": "a"},\n {"prompt": "\xe9"}]', r"data\.json, line 2: not UTF-8 text \(byte 0xe9"),
    ],
)  # fmt: skip
def test_invalid_utf8_names_the_file_and_line(tmp_path, name, content, where):
    (tmp_path / name).write_bytes(content)
    with pytest.raises(DataError, match=where + r".*save the file as UTF-8"):
        load_rows(DataSourceConfig(source=str(tmp_path / name)))


def test_unreadable_parquet_and_plain_folders_are_data_errors(tmp_path):
    pytest.importorskip("pyarrow")
    (tmp_path / "random.parquet").write_bytes(b"not a parquet file" * 10)
    with pytest.raises(DataError, match=r"random\.parquet: not a readable Parquet file \(.*\); check the file"):
        load_rows(DataSourceConfig(source=str(tmp_path / "random.parquet")))
    pytest.importorskip("datasets")
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "a.txt").write_text("x")
    with pytest.raises(DataError, match=r"notes: a folder, but not one written by datasets' save_to_disk"):
        load_rows(DataSourceConfig(source=str(tmp_path / "notes")))


def test_rows_record_where_they_were_read(tmp_path):
    (tmp_path / "d.jsonl").write_text('{"prompt": "a"}\n\n{"prompt": "b"}\n')
    (tmp_path / "d.csv").write_text("prompt\na\nb\n")
    (tmp_path / "d.json").write_text('[{"prompt": "a"}, {"prompt": "b"}]')
    expected = {"d.jsonl": ["line 1", "line 3"], "d.csv": ["line 2", "line 3"],
                "d.json": ["item 0 (0-based)", "item 1 (0-based)"]}  # fmt: skip
    for name, lines in expected.items():
        rows = load_rows(DataSourceConfig(source=str(tmp_path / name)))
        assert [row[LOCATION_KEY] for row in rows] == [f"{tmp_path / name}, {line}" for line in lines]
        assert row_location(rows[1], 5) == f"{tmp_path / name}, {lines[1]}"
    rows = load_rows(DataSourceConfig(source="procedural:arithmetic", args={"size": 2}))
    assert rows[1][LOCATION_KEY] == "procedural:arithmetic, row 1 (0-based)"
    assert row_location({"prompt": "typed in Python"}, 5) == "row 5 of the batch"


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
    assert load(DataSourceConfig(source=str(source), columns=MAPPING)) == EXPECTED


def test_datasets_folder(tmp_path):
    datasets = pytest.importorskip("datasets")
    datasets.DatasetDict({"train": datasets.Dataset.from_list(ROWS)}).save_to_disk(str(tmp_path / "ds"))
    assert load(DataSourceConfig(source=str(tmp_path / "ds"), columns=MAPPING)) == EXPECTED
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


# ----------------------------------------------------------------------------------------------------------------------
# hf: sources (Hugging Face Hub datasets by name), offline
# ----------------------------------------------------------------------------------------------------------------------


def cached_hub_dataset(cache: Path, name: str, subset: str, splits: dict[str, list[dict]]) -> None:
    """Put ``splits`` in a datasets cache at ``cache`` as if ``load_dataset(name, subset)`` had run once online."""
    datasets = pytest.importorskip("datasets")
    import shutil

    data_files = {}
    for split, rows in splits.items():
        data_files[split] = str(cache.parent / f"{split}.parquet")
        datasets.Dataset.from_list(rows).to_parquet(data_files[split])
    builder = datasets.load_dataset_builder("parquet", data_files=data_files, cache_dir=str(cache / "build"))
    builder.download_and_prepare()
    built = Path(builder.cache_dir)
    target = cache / "___".join(name.split("/")) / subset / built.parent.name / built.name
    shutil.copytree(built, target)
    info = json.loads((target / "dataset_info.json").read_text())
    (target / "dataset_info.json").write_text(json.dumps({**info, "config_name": subset}))
    for arrow in target.glob("parquet-*.arrow"):  # files are named after the dataset
        arrow.rename(target / arrow.name.replace("parquet-", f"{name.split('/')[-1]}-", 1))


@pytest.fixture
def hub_cache(tmp_path, monkeypatch):
    datasets = pytest.importorskip("datasets")
    cache = tmp_path / "cache"
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", cache)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    cached_hub_dataset(cache, "genalign-tests/tiny", "main", {"train": ROWS, "test": ROWS[:1]})
    return cache


def test_hub_dataset_from_the_local_cache(hub_cache):
    config = DataSourceConfig(source="hf:genalign-tests/tiny", subset="main", split="train", columns=MAPPING)
    assert load(config, required=["answer"]) == EXPECTED
    config = DataSourceConfig(source="hf:genalign-tests/tiny", subset="main", split="test", columns=MAPPING, limit=1)
    assert load(config) == EXPECTED[:1]
    with pytest.raises(DataError, match=r"holds splits \['test', 'train'\]; set data\.split"):
        load_rows(DataSourceConfig(source="hf:genalign-tests/tiny", subset="main", columns=MAPPING))
    with pytest.raises(DataError, match=r"hf:genalign-tests/tiny \(subset 'main', split 'val'\).*Unknown split"):
        load_rows(DataSourceConfig(source="hf:genalign-tests/tiny", subset="main", split="val"))


def test_hub_rows_go_through_the_row_checks(hub_cache):
    with pytest.raises(DataError, match=r"hf:genalign-tests/tiny \(subset 'main', split 'train'\), row 0 \(0-based\)"):
        load_rows(DataSourceConfig(source="hf:genalign-tests/tiny", subset="main", split="train"))


def test_hub_dataset_offline_and_not_cached_fails_fast_with_the_download_command(tmp_path, monkeypatch):
    datasets = pytest.importorskip("datasets")
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "empty_cache")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    start = time.perf_counter()
    with pytest.raises(DataError) as error:
        load_rows(DataSourceConfig(source="hf:openai/gsm8k", subset="main", split="train"))
    assert time.perf_counter() - start < 5
    message = str(error.value)
    assert message.startswith("hf:openai/gsm8k (subset 'main', split 'train'): not in the local datasets cache")
    assert "runs offline here (HF_HUB_OFFLINE=1 is set)" in message
    command = "datasets.load_dataset('openai/gsm8k', 'main', split='train').save_to_disk('data/gsm8k_train')"
    assert command in message and "data.source: data/gsm8k_train" in message and "prepare_data.py" in message


def test_unreachable_hub_counts_as_offline_without_the_variable(tmp_path, monkeypatch):
    """No HF_HUB_OFFLINE, but the endpoint does not answer: no HTTP retries (~25-50 s), the cache only."""
    datasets = pytest.importorskip("datasets")
    from huggingface_hub import constants

    from genalign.data import hub

    for variable in hub.OFFLINE_VARIABLES:
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "empty_cache")
    monkeypatch.setattr(
        hub, "probe", lambda url, timeout_s=hub.PROBE_TIMEOUT_S: "huggingface.co:443 is unreachable (test)"
    )
    start = time.perf_counter()
    with pytest.raises(DataError, match=r"runs offline here \(huggingface\.co:443 is unreachable \(test\)\)"):
        load_rows(DataSourceConfig(source="hf:genalign-tests/not-a-dataset", split="train"))
    assert time.perf_counter() - start < 5
    assert constants.HF_HUB_OFFLINE is False and datasets.config.HF_HUB_OFFLINE is False  # restored


def test_probe_is_bounded_and_sees_a_listening_port():
    import socket

    from genalign.data.hub import probe

    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(1)
        assert probe(f"http://127.0.0.1:{server.getsockname()[1]}") is None
    with socket.socket() as closed:  # a port nobody listens on
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    start = time.perf_counter()
    assert "127.0.0.1" in probe(f"http://127.0.0.1:{port}", timeout_s=1.0)
    assert time.perf_counter() - start < 2


def test_missing_hub_looking_path_suggests_hf_prefix(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(FileNotFoundError, match=r"'openai/gsm8k' does not exist.*data\.source: hf:openai/gsm8k"):
        load_rows(DataSourceConfig(source="openai/gsm8k", columns=MAPPING))
    with pytest.raises(FileNotFoundError) as error:
        load_rows(DataSourceConfig(source="data/gsm8k_train.jsonl"))
    assert "hf:" not in str(error.value)


@pytest.mark.parametrize(
    ("config", "message"),
    [
        (DataSourceConfig(source="hf:"), r"'' is not a Hub dataset id"),
        (DataSourceConfig(source="hf:a/b/c"), r"'a/b/c' is not a Hub dataset id.*hf:ORG/NAME"),
        (DataSourceConfig(source="hf:./local"), r"not a Hub dataset id.*needs no prefix"),
        (DataSourceConfig(source="hf:openai/gsm8k", args={"size": 3}), r"data\.args.*data\.subset"),
        (DataSourceConfig(source="hf:openai/gsm8k", split=""), r"data\.split=''"),
        (DataSourceConfig(source="x.jsonl", subset="main"), r"data\.subset='main' only applies to hf: sources"),
        (DataSourceConfig(source="hf://datasets/openai/gsm8k"), r"is not a Hub dataset id; write 'hf:ORG/NAME'"),
    ],
)
def test_hub_config_validation_without_io(config, message):
    with pytest.raises(ValueError, match=message):
        config.validate()
    DataSourceConfig(source="hf:openai/gsm8k", subset="main", split="train[:100]").validate()
    DataSourceConfig(source="hf:gsm8k").validate()
