"""scripts/prepare_data.py: each dataset family converted from a tiny local copy in the real dataset's schema
(tests/data/fixtures/), checked against hand-written rows and loaded with the preset's own data section."""

from __future__ import annotations

import importlib.util
import json
import time
from pathlib import Path

import pytest
from PIL import Image

from genalign.config import from_dict
from genalign.config.core import load_yaml
from genalign.data import DataError, DataSourceConfig, load_rows
from genalign.data import prepare as prepare_module
from genalign.data.prepare import export_images, prepare
from genalign.data.published_datasets import BY_NAME, DATASETS, dapo_row, math_level

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = Path(__file__).resolve().parent / "fixtures"
CONFIGS = ROOT / "configs"
#: columns the presets' rewards read from each row
REWARD_COLUMNS = {
    "math_equivalence": ["answer"],
    "exact_match": ["answer"],
    "answer_accuracy": ["answer"],
    "box_iou": ["box"],
    "geneval_shapes": ["target"],
}


def script():
    spec = importlib.util.spec_from_file_location("prepare_data_script", ROOT / "scripts" / "prepare_data.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def geometry3k_copy(folder: Path) -> Path:
    """A ``save_to_disk`` DatasetDict in hiyouga/geometry3k's layout (``images`` holds decoded images)."""
    datasets = pytest.importorskip("datasets")
    features = datasets.Features(
        {
            "images": datasets.Sequence(datasets.Image()),
            "problem": datasets.Value("string"),
            "answer": datasets.Value("string"),
        }
    )
    rows = [json.loads(line) for line in (FIXTURES / "geometry3k" / "rows.jsonl").read_text().splitlines()]
    splits = {}
    for split in ("train", "test"):
        chosen = [row for row in rows if row["split"] == split]
        splits[split] = datasets.Dataset.from_dict(
            {
                "images": [
                    [Image.open(FIXTURES / "geometry3k" / name) for name in row["image_files"]] for row in chosen
                ],
                "problem": [row["problem"] for row in chosen],
                "answer": [row["answer"] for row in chosen],
            },
            features=features,
        )
    datasets.DatasetDict(splits).save_to_disk(str(folder))
    return folder


def local_copies(tmp: Path) -> dict[str, list[str]]:
    """``--from`` values of every dataset's fixture."""
    return {
        "gsm8k": [str(FIXTURES / "gsm8k")],
        "math": [str(FIXTURES / "math")],
        "math500": [str(FIXTURES / "math500.jsonl")],
        "dapo_math_17k": [str(FIXTURES / "dapo_math_17k.jsonl")],
        "aime_2024": [str(FIXTURES / "aime_2024.jsonl")],
        "deepmath_1024": [str(FIXTURES / "deepmath.jsonl")],
        "acecoder_hard": [str(FIXTURES / "acecoder.jsonl")],
        "humaneval": [str(FIXTURES / "humaneval.jsonl")],
        "geometry3k": [str(geometry3k_copy(tmp / "geometry3k_raw"))],
        "refcoco": [str(FIXTURES / "refcoco")],
        "pickscore": [str(FIXTURES / "pickscore")],
        "geneval": [str(FIXTURES / "geneval")],
        "hpdv2": [
            f"train={FIXTURES / 'hpdv2' / 'prompts.txt'}",
            f"test={FIXTURES / 'hpdv2' / 'anime.json'}",
            f"test={FIXTURES / 'hpdv2' / 'photo.json'}",
        ],
        "video_prompts": [str(FIXTURES / "video_prompts.txt")],
    }


@pytest.fixture(scope="module")
def prepared(tmp_path_factory) -> Path:
    """Every dataset prepared from its fixture into one ``data`` folder."""
    tmp = tmp_path_factory.mktemp("prepare")
    copies = local_copies(tmp)
    assert set(copies) == set(BY_NAME), "every dataset spec needs a fixture"
    for spec in DATASETS:
        prepare(spec, tmp / "data", local=copies[spec.name], log=lambda line: None)
    return tmp / "data"


def read(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_math_family(prepared):
    gsm8k_train, gsm8k_test = read(prepared / "gsm8k_train.jsonl"), read(prepared / "gsm8k_test.jsonl")
    assert [row["answer"] for row in gsm8k_train] == ["72", "2500"]  # after '####', commas removed
    assert gsm8k_train[0]["question"].startswith("Natalia sold clips") and "#### 72" in gsm8k_train[0]["solution"]
    assert [row["answer"] for row in gsm8k_test] == ["18"]
    math_train = read(prepared / "math_train.jsonl")
    assert [(row["answer"], row["level"], row["type"]) for row in math_train] == [
        ("2", 1, "Prealgebra"),
        ("\\frac{1}{2}", 3, "Algebra"),
        ("5", 5, "Algebra"),  # the last box; the row without a box is dropped
    ]
    assert [row["answer"] for row in read(prepared / "math_level3to5.jsonl")] == ["\\frac{1}{2}", "5"]
    math500 = read(prepared / "math500.jsonl")
    assert [(row["answer"], row["level"]) for row in math500] == [
        ("\\left( 3, \\frac{\\pi}{2} \\right)", 2),
        ("1024", 1),
    ]
    dapo = read(prepared / "dapo_math_17k.jsonl")
    assert [row["solution"] for row in dapo] == ["6", "55"]  # the repeated prompt is dropped
    assert dapo[0]["prompt"].startswith("Solve the following math problem") and "divisors does 12" in dapo[0]["prompt"]
    assert [(row["problem"][:12], row["answer"]) for row in read(prepared / "aime_2024.jsonl")] == [
        ("Find the num", "33"),
        ("Let $p$ be t", "110"),
    ]


def test_dapo_original_layout_and_levels():
    raw = {"prompt": [{"role": "user", "content": "Q?"}], "reward_model": {"ground_truth": 7}, "data_source": "x"}
    assert dapo_row(raw) == {"prompt": "Q?", "solution": "7", "data_source": "x"}
    assert [math_level(level) for level in ("Level 4", 2, "Level ?", None)] == [4, 2, None, None]


def test_code_family(prepared):
    # pass rates (qwen, llama): oss_0 (0, .5), oss_1 (.25, .25), oss_2 (1, 0), oss_3 (.5, 1), oss_4 (.25, .75),
    # oss_5 (1, .5), oss_6 none -> means [.25, .25, .5, .75, .5, .75], 20th percentile .25 -> oss_0, oss_1;
    # spreads [.25, 0, .5, .25, .25, .25], 40th percentile .25 -> oss_0
    assert read(prepared / "acecoder_hard.jsonl") == [
        {
            "question": "Write a function f0(x) that returns x.",
            "reference": "def f0(x):\n    return x  # other_model",  # best pass rate of all inferences
            "tests": ["assert f0(1) == 1", "assert f0(2) == 2"],
            "id": "oss_0",
            "source": "oss",
        }
    ]
    assert read(prepared / "humaneval.jsonl") == [
        {
            "prompt": 'def add(a, b):\n    """Return a + b."""\n',
            "reference": "    return a + b\n",
            "test_code": "def check(candidate):\n    assert candidate(1, 2) == 3\n",
            "entry_point": "add",
            "task_id": "HumanEval/0",
        }
    ]


def test_vlm_family(prepared):
    train, test = read(prepared / "geometry3k" / "train.jsonl"), read(prepared / "geometry3k" / "test.jsonl")
    assert train == [
        {
            "problem": "<image>Find x. Round to the nearest tenth.",
            "answer": "3.2",
            "images": ["images/train/000000_0.png"],
        }
    ]
    assert test[0]["images"] == ["images/test/000000_0.png"] and test[0]["answer"] == "24"
    written = Image.open(prepared / "geometry3k" / train[0]["images"][0])
    assert written.tobytes() == Image.open(FIXTURES / "geometry3k" / "fig_train.png").convert("RGB").tobytes()
    question = "Please provide the bounding box coordinate of the region this sentence describes: {}."
    expected_box = [103.93, 299.99, 342.05, 477.41]
    assert [(row["problem"], row["image"], row["box"]) for row in read(prepared / "refcoco" / "train.jsonl")] == [
        (question.format("the lady with the blue shirt"), "train2014/COCO_train2014_000000581857.jpg", expected_box),
        (question.format("lady w back to us"), "train2014/COCO_train2014_000000581857.jpg", expected_box),
    ]
    assert read(prepared / "refcoco" / "val.jsonl")[0]["problem"] == question.format("Left motorcycle")


def test_text_to_image_family(prepared):
    def prompts(name):
        return [row["prompt"] for row in read(prepared / name)]

    assert prompts("pickscore_train_prompts.jsonl") == [
        "a red fox in the snow, digital art",
        "an astronaut riding a horse on mars",
    ]
    assert prompts("pickscore_test_prompts.jsonl") == ["a bowl of ramen, studio lighting"]
    assert prompts("hpdv2_train_prompts.jsonl") == ["a castle on a hill at sunset", "portrait of a robot, oil painting"]
    assert prompts("hpdv2_test_prompts.jsonl") == [
        "anime girl with a sword",
        "a cute cat, anime style",
        "a photo of a lighthouse at dawn",
    ]
    assert prompts("video_test_prompts.jsonl") == [f"a drone shot over a forest, clip {i}" for i in range(64)]
    assert prompts("video_train_prompts.jsonl") == [
        "a drone shot over a forest, clip 64",
        "a drone shot over a forest, clip 65",
    ]
    geneval = read(prepared / "geneval_train_prompts.jsonl")
    assert [row["target"] for row in geneval] == [
        {"objects": [{"color": None, "kind": "bench", "count": 2}], "relation": None},
        {
            "objects": [{"color": None, "kind": "dog", "count": 1}, {"color": None, "kind": "cat", "count": 1}],
            "relation": {"subject": 1, "relation": "right of", "object": 0},
        },
    ]
    assert read(prepared / "geneval_test_prompts.jsonl")[0]["target"]["objects"] == [
        {"color": "red", "kind": "car", "count": 1},
        {"color": "blue", "kind": "umbrella", "count": 1},
    ]


PRESET_CASES = [(spec.name, preset) for spec in DATASETS for preset in spec.presets]
#: where the presets name the prepared files: data/ of the repository, from their own folder configs/
PRESET_DATA = "../data/"


@pytest.mark.parametrize(("name", "preset"), PRESET_CASES, ids=[f"{n}-{p}" for n, p in PRESET_CASES])
def test_output_loads_with_the_presets_data_section(prepared, name, preset):
    config = load_yaml(CONFIGS / f"{preset}.yaml")
    required = sorted({c for reward in config["rewards"] for c in REWARD_COLUMNS.get(reward["fn"], [])})
    files = {output.file for output in BY_NAME[name].outputs}
    checked = 0
    for section in ("train", "eval"):
        data = dict(config["data"][section])
        relative = data["source"].removeprefix(PRESET_DATA)
        if relative not in files:
            continue
        data["source"] = str(prepared / relative)
        rows = load_rows(from_dict(DataSourceConfig, data, f"data.{section}"), required=required)
        assert len(rows) == len(read(prepared / relative))
        image_root = config["policy"].get("image_root")
        if image_root and BY_NAME[name].image_columns == ("images",):  # images written next to the JSONL
            root = prepared / image_root.removeprefix(PRESET_DATA)
            assert all((root / path).is_file() for row in rows for path in row["images"])
        checked += 1
    assert checked, f"{preset} reads none of {sorted(files)}"


def test_every_preset_data_file_has_a_dataset():
    written = {output.file for spec in DATASETS for output in spec.outputs}
    for path in sorted(CONFIGS.glob("*.yaml")):
        for section in load_yaml(path).get("data", {}).values():
            source = section.get("source", "") if isinstance(section, dict) else ""
            if source.startswith(PRESET_DATA):
                assert source.removeprefix(PRESET_DATA) in written, f"{path.name}: nothing writes {source}"


def test_images_from_bytes_keep_their_format(tmp_path):
    import io

    spec = BY_NAME["geometry3k"]
    encoded = {}
    for kind in ("PNG", "JPEG"):
        buffer = io.BytesIO()
        Image.new("RGB", (4, 4), "red").save(buffer, format=kind)
        encoded[kind] = buffer.getvalue()
    rows = [{"images": [{"bytes": encoded["PNG"], "path": None}, {"bytes": encoded["JPEG"], "path": "x.jpg"}]}]
    out = export_images(spec, rows, tmp_path, spec.outputs[0])
    assert out == [{"images": ["images/train/000000_0.png", "images/train/000000_1.jpg"]}]
    assert (tmp_path / "geometry3k" / out[0]["images"][1]).read_bytes() == encoded["JPEG"]


def test_list_names_every_dataset_and_file(capsys):
    assert script().main(["--list"]) == 0
    listed = capsys.readouterr().out
    for spec in DATASETS:
        assert f"{spec.name}: " in listed and spec.source_text() in listed
        assert all(f"data/{output.file}" in listed for output in spec.outputs)


def test_cli_writes_files_and_limit(tmp_path, capsys):
    main = script().main
    assert main(["gsm8k", "--out", str(tmp_path), "--from", str(FIXTURES / "gsm8k"), "--limit", "1"]) == 0
    assert [row["answer"] for row in read(tmp_path / "gsm8k_train.jsonl")] == ["72"]
    assert main(["gsm8", "--out", str(tmp_path)]) == 2
    assert "Did you mean 'gsm8k'" in capsys.readouterr().err


def test_hub_source_is_wired(tmp_path, monkeypatch):
    calls = []

    def fake_load(name, subset, split, *, advice):
        calls.append((name, subset, split))
        return {
            s: [json.loads(x) for x in (FIXTURES / "gsm8k" / f"{s}.jsonl").read_text().splitlines()]
            for s in ("train", "test")
        }

    monkeypatch.setattr(prepare_module, "load_hub_splits", fake_load)
    assert prepare(BY_NAME["gsm8k"], tmp_path, log=lambda line: None) == {"gsm8k_train.jsonl": 2, "gsm8k_test.jsonl": 1}
    assert calls == [("openai/gsm8k", "main", None)]


@pytest.mark.parametrize(("name", "advice"), [("gsm8k", "save_to_disk('gsm8k_raw')"), ("pickscore", "--from train=")])
def test_offline_without_a_copy_fails_fast_with_the_fix(tmp_path, monkeypatch, name, advice):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    start = time.perf_counter()
    with pytest.raises(DataError, match="offline") as error:
        prepare(BY_NAME[name], tmp_path, log=lambda line: None)
    assert time.perf_counter() - start < 5
    assert advice in str(error.value) and f"prepare_data.py {name} --out data/ --from" in str(error.value)


def test_wrong_local_copy_names_split_row_and_fields(tmp_path):
    with pytest.raises(DataError, match=r"no local copy of split\(s\) \['test'\]"):
        prepare(BY_NAME["gsm8k"], tmp_path, local=[str(FIXTURES / "math")])
    math_rows = str(FIXTURES / "math" / "train.jsonl")
    with pytest.raises(
        DataError, match=r"gsm8k, split 'train', row 0 \(0-based\): cannot convert.*'problem'.*hf:openai"
    ):
        prepare(BY_NAME["gsm8k"], tmp_path, local=[f"train={math_rows}", f"test={math_rows}"])
