"""The datasets of the full-scale presets: where each lives and how its rows become the rows the preset reads.

Each :class:`~genalign.data.prepare.DatasetSpec` names its source (a Hub id and subset, or raw prompt files), its
output files under ``data/`` (the paths in the presets' ``data.train`` / ``data.eval``), and a ``convert`` function
from one raw row to the columns the preset maps (``data.*.columns``) and its rewards read (``answer``, ``box``,
``target``, ``tests`` ...). ``scripts/prepare_data.py --list`` prints this table; docs/data.md explains it.

Field names of the raw rows follow the dataset cards (see ``notes`` where a schema could not be checked here).
"""

from __future__ import annotations

import statistics
from typing import Any

from genalign.data.boxed import last_boxed
from genalign.data.prepare import DatasetSpec, Output, Row

RAW_GITHUB = "https://raw.githubusercontent.com"
#: VLM-R1's REC question, with the referring expression appended
GROUNDING_QUESTION = "Please provide the bounding box coordinate of the region this sentence describes: {}."
#: DiffuCoder's "hard" AceCode subset: pass rates of these models, mean at most the 20th percentile, then spread
#: at least the 40th percentile (recipes/process_data.py of apple/ml-diffucoder)
ACECODE_MODELS = ("qwen_coder_2.5", "llama3_instruct")


# ----------------------------------------------------------------------------------------------------------------------
# math and code
# ----------------------------------------------------------------------------------------------------------------------


def gsm8k_row(raw: Row) -> Row:
    """GSM8K: the final answer is what follows ``####`` in the worked solution (thousands commas removed)."""
    solution = raw["answer"]
    if "####" not in solution:
        raise ValueError(f"no '####' final answer in {solution[-80:]!r}")
    final = solution.rsplit("####", 1)[1].strip().replace(",", "")
    return {"question": raw["question"], "answer": final, "solution": solution}


def math_level(level: Any) -> int | None:
    """``"Level 3"`` (MATH) or ``3`` (MATH-500) -> 3; ``"Level ?"`` -> None."""
    text = str(level).removeprefix("Level").strip()
    return int(text) if text.isdigit() else None


def math_row(raw: Row) -> Row | None:
    """MATH: the answer is the last ``\\boxed{}`` of the solution; rows without one are dropped."""
    answer = last_boxed(raw["solution"])
    if answer is None or not answer.strip():
        return None
    return {
        "question": raw["problem"],
        "answer": answer.strip(),
        "solution": raw["solution"],
        "level": math_level(raw.get("level")),
        "type": raw.get("type"),
    }


def level_3_to_5(row: Row) -> bool:
    return row["level"] is not None and 3 <= row["level"] <= 5


def math500_row(raw: Row) -> Row:
    return {
        "problem": raw["problem"],
        "answer": str(raw["answer"]),
        "solution": raw.get("solution"),
        "subject": raw.get("subject"),
        "level": math_level(raw.get("level")),
        "unique_id": raw.get("unique_id"),
    }


def dapo_row(raw: Row) -> Row:
    """DAPO-Math-17k, processed by open-r1 (``prompt`` string, ``solution``) or the original layout (``prompt`` as
    chat messages, the answer in ``reward_model.ground_truth``)."""
    prompt = raw["prompt"]
    if isinstance(prompt, list):
        prompt = prompt[0]["content"]
    solution = raw.get("solution") or raw["reward_model"]["ground_truth"]
    return {"prompt": prompt, "solution": str(solution), "data_source": raw.get("data_source")}


def deepmath_row(raw: Row) -> Row:
    """DeepMath-103K: ``question``, ``final_answer`` (and the difficulty / topic labels)."""
    return {
        "question": raw["question"],
        "final_answer": str(raw["final_answer"]),
        "difficulty": raw.get("difficulty"),
        "topic": raw.get("topic"),
    }


def aime_row(raw: Row) -> Row:
    return {
        "problem": raw["problem"],
        "answer": str(raw["answer"]),
        "id": raw.get("id"),
        "year": raw.get("year"),
        "url": raw.get("url"),
    }


def _model_pass_rates(raw: Row) -> list[float]:
    return [i["pass_rate"] for i in raw["inferences"] if i["model_name"] in ACECODE_MODELS]


def acecode_hard(rows: list[Row]) -> list[Row]:
    """DiffuCoder's hard subset of AceCode: mean pass rate <= its 20th percentile, then pass-rate spread >= the 40th
    percentile of all rows' spreads (both percentiles over the whole split, as in the original script). Rows without
    pass rates of those models are dropped."""
    rated = [(row, rates) for row in rows if (rates := _model_pass_rates(row))]  # rows without them are dropped
    if not rated:
        raise ValueError(f"no row has pass rates of {ACECODE_MODELS} in 'inferences'")
    means = [statistics.fmean(rates) for _, rates in rated]
    spreads = [statistics.pstdev(rates) for _, rates in rated]
    mean_cut, spread_cut = _percentile(means, 20), _percentile(spreads, 40)
    return [row for (row, _), m, s in zip(rated, means, spreads) if m <= mean_cut and s >= spread_cut]


def _percentile(values: list[float], q: float) -> float:
    """Linear-interpolation percentile (numpy's default)."""
    ordered = sorted(values)
    position = (len(ordered) - 1) * q / 100
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def acecode_row(raw: Row) -> Row | None:
    """AceCode: the question, its assert tests (for ``code_execution``) and, as ``reference``, the best-passing
    completion of the dataset's model inferences; rows without inferences are dropped."""
    if not raw.get("inferences"):
        return None
    best = max(raw["inferences"], key=lambda inference: inference["pass_rate"])
    return {
        "question": raw["question"],
        "reference": best["completion"],
        "tests": list(raw["test_cases"]),
        "id": raw.get("id"),
        "source": raw.get("source"),
    }


def humaneval_row(raw: Row) -> Row:
    """HumanEval: ``reference`` is the canonical solution; ``test_code`` and ``entry_point`` feed ``code_execution``."""
    return {
        "prompt": raw["prompt"],
        "reference": raw["canonical_solution"],
        "test_code": raw["test"],
        "entry_point": raw["entry_point"],
        "task_id": raw["task_id"],
    }


# ----------------------------------------------------------------------------------------------------------------------
# vision-language
# ----------------------------------------------------------------------------------------------------------------------


def geometry3k_row(raw: Row) -> Row:
    """Geometry3K (EasyR1 layout): ``problem`` holds one ``<image>`` marker per image of ``images``."""
    images = raw["images"] if isinstance(raw["images"], list) else [raw["images"]]
    return {"problem": raw["problem"], "answer": str(raw["answer"]), "images": images}


def refcoco_rows(raw: Row) -> list[Row]:
    """RefCOCO (jxu124/refcoco layout): one row per referring expression; ``bbox`` is ``[x0, y0, x1, y1]`` in pixels
    of the COCO image, ``image_path`` is ``coco/train2014/<file>`` (the images are not in the dataset)."""
    image = raw.get("image")
    if image is None or isinstance(image, str):
        image = (image or raw["image_path"]).removeprefix("coco/")
    sentences = raw.get("captions") or [sentence["sent"] for sentence in raw["sentences"]]
    box = [float(value) for value in raw["bbox"]]
    if len(box) != 4 or box[2] <= box[0] or box[3] <= box[1]:
        raise ValueError(f"bbox {raw['bbox']!r} is not [x0, y0, x1, y1] with x1 > x0 and y1 > y0")
    return [
        {
            "problem": GROUNDING_QUESTION.format(sentence.strip().rstrip(".")),
            "image": image,
            "box": box,
            "ref_id": raw.get("ref_id"),
            "category_id": raw.get("category_id"),
        }
        for sentence in sentences
        if sentence.strip()
    ]


# ----------------------------------------------------------------------------------------------------------------------
# text-to-image / text-to-video prompts
# ----------------------------------------------------------------------------------------------------------------------


def prompt_row(raw: Row) -> Row | None:
    """A prompt list (``.txt`` line, JSON string or a row with ``prompt`` / ``caption``); blank prompts are dropped."""
    prompt = raw.get("prompt", raw.get("caption"))
    if not isinstance(prompt, str):
        raise ValueError(f"expected a 'prompt' (or 'caption') string, got {prompt!r}")
    return {"prompt": prompt.strip()} if prompt.strip() else None


def geneval_row(raw: Row) -> Row:
    """GenEval metadata (``tag``, ``include`` [{class, count, color?, position?}], ``prompt``) with a ``target`` in the
    layout of :func:`genalign.data.shapes.parse_prompt` (objects with ``kind`` = the COCO class, and the relation of
    a ``position: [relation, index]`` entry)."""
    objects, relation = [], None
    for index, item in enumerate(raw["include"]):
        objects.append({"color": item.get("color"), "kind": item["class"], "count": int(item.get("count", 1))})
        if item.get("position"):
            name, other = item["position"]
            relation = {"subject": index, "relation": name, "object": int(other)}
    return {
        "prompt": raw["prompt"],
        "tag": raw.get("tag"),
        "include": raw["include"],
        "target": {"objects": objects, "relation": relation},
    }


# ----------------------------------------------------------------------------------------------------------------------
# the table
# ----------------------------------------------------------------------------------------------------------------------

FLOW_GRPO = f"{RAW_GITHUB}/yifan123/flow_grpo/main/dataset"
HPD_BENCHMARK = "https://huggingface.co/datasets/zhwang/HPDv2/resolve/main/benchmark"

DATASETS: tuple[DatasetSpec, ...] = (
    DatasetSpec(
        name="gsm8k",
        about="GSM8K grade-school maths; answer = the number after '####'",
        presets=("d1_llada_gsm8k", "espo_llada_gsm8k", "spg_llada_gsm8k"),
        outputs=(Output("gsm8k_train.jsonl", "train"), Output("gsm8k_test.jsonl", "test")),
        convert=gsm8k_row,
        hub="openai/gsm8k",
        subset="main",
    ),
    DatasetSpec(
        name="math",
        about="MATH (Hendrycks) train split; answer = last \\boxed{} of the solution; plus its level 3-5 subset",
        presets=("grpo_qwen2.5_math", "gspo_qwen2.5", "dr_grpo_qwen2.5_math"),
        outputs=(Output("math_train.jsonl", "train"), Output("math_level3to5.jsonl", "train", keep=level_3_to_5)),
        convert=math_row,
        hub="DigitalLearningGmbH/MATH-lighteval",
        subset="default",
        notes="Dr. GRPO's level 3-5 set also draws on MATH's test split (minus MATH-500); this one is train only.",
    ),
    DatasetSpec(
        name="math500",
        about="MATH-500 evaluation problems (problem, answer)",
        presets=("grpo_qwen2.5_math", "gspo_qwen2.5", "dr_grpo_qwen2.5_math"),
        outputs=(Output("math500.jsonl", "test"),),
        convert=math500_row,
        hub="HuggingFaceH4/MATH-500",
    ),
    DatasetSpec(
        name="dapo_math_17k",
        about="DAPO-Math-17k, de-duplicated (prompt with DAPO's instruction, solution = integer answer)",
        presets=("dapo_qwen2.5",),
        outputs=(Output("dapo_math_17k.jsonl", "train"),),
        convert=dapo_row,
        hub="open-r1/DAPO-Math-17k-Processed",
        subset="all",
        unique="prompt",
    ),
    DatasetSpec(
        name="deepmath_1024",
        about="DeepMath-103K, its first 1024 problems (question, final_answer): RePO's training subset size",
        presets=("repo_qwen2.5_math",),
        outputs=(Output("deepmath_1024.jsonl", "train", rows=slice(0, 1024)),),
        convert=deepmath_row,
        hub="zwhe99/DeepMath-103K",
    ),
    DatasetSpec(
        name="aime_2024",
        about="AIME 2024, 30 problems (problem, answer)",
        presets=("dapo_qwen2.5",),
        outputs=(Output("aime_2024.jsonl", "train"),),
        convert=aime_row,
        hub="HuggingFaceH4/aime_2024",
    ),
    DatasetSpec(
        name="acecoder_hard",
        about="AceCode, DiffuCoder's hard subset (question, assert tests, reference = best model completion)",
        presets=("coupled_grpo_diffucoder",),
        outputs=(Output("acecoder_hard.jsonl", "train"),),
        convert=acecode_row,
        hub="TIGER-Lab/AceCode-89K",
        select=acecode_hard,
        notes="DiffuCoder also adds a 'Please complete the following problem' rewrite of each question; not done here.",
    ),
    DatasetSpec(
        name="humaneval",
        about="HumanEval, 164 problems (prompt, reference, test_code, entry_point)",
        presets=("coupled_grpo_diffucoder",),
        outputs=(Output("humaneval.jsonl", "test"),),
        convert=humaneval_row,
        hub="openai/openai_humaneval",
    ),
    DatasetSpec(
        name="geometry3k",
        about="Geometry3K with figures (problem with <image>, answer, images written under geometry3k/images/)",
        presets=("grpo_qwen2.5vl_geometry",),
        outputs=(Output("geometry3k/train.jsonl", "train"), Output("geometry3k/test.jsonl", "test")),
        convert=geometry3k_row,
        hub="hiyouga/geometry3k",
        image_columns=("images",),
        image_root="geometry3k",
    ),
    DatasetSpec(
        name="refcoco",
        about="RefCOCO referring expressions (problem, image = COCO path, box [x0, y0, x1, y1] in pixels)",
        presets=("grpo_qwen2.5vl_grounding",),
        outputs=(Output("refcoco/train.jsonl", "train"), Output("refcoco/val.jsonl", "validation")),
        convert=refcoco_rows,
        hub="jxu124/refcoco",
        image_columns=("image",),
        image_root="coco",
        notes="The COCO train2014 images are not in the dataset: put them under data/coco/train2014/ "
        "(http://images.cocodataset.org/zips/train2014.zip).",
    ),
    DatasetSpec(
        name="pickscore",
        about="Flow-GRPO's Pick-a-Pic prompt lists (prompt)",
        presets=("chunk_grpo_sd3", "diffusionnft_sd35", "flow_grpo_fast_sd35", "tempflow_grpo_sd3"),
        outputs=(Output("pickscore_train_prompts.jsonl", "train"), Output("pickscore_test_prompts.jsonl", "test")),
        convert=prompt_row,
        urls={"train": (f"{FLOW_GRPO}/pickscore/train.txt",), "test": (f"{FLOW_GRPO}/pickscore/test.txt",)},
        unique="prompt",
    ),
    DatasetSpec(
        name="geneval",
        about="Flow-GRPO's GenEval prompts with metadata (prompt, tag, include, target)",
        presets=("flow_grpo_sd35_geneval",),
        outputs=(Output("geneval_train_prompts.jsonl", "train"), Output("geneval_test_prompts.jsonl", "test")),
        convert=geneval_row,
        urls={
            "train": (f"{FLOW_GRPO}/geneval/train_metadata.jsonl",),
            "test": (f"{FLOW_GRPO}/geneval/test_metadata.jsonl",),
        },
    ),
    DatasetSpec(
        name="hpdv2",
        about="HPDv2 prompts: DanceGRPO's training list; the 3,200 HPSv2 benchmark prompts for evaluation",
        presets=("branchgrpo_flux", "branchgrpo_mix_flux", "dance_grpo_flux", "mix_grpo_flux"),
        outputs=(Output("hpdv2_train_prompts.jsonl", "train"), Output("hpdv2_test_prompts.jsonl", "test")),
        convert=prompt_row,
        urls={
            "train": (f"{RAW_GITHUB}/XueZeyue/DanceGRPO/main/prompts.txt",),
            "test": tuple(f"{HPD_BENCHMARK}/{style}.json" for style in ("anime", "concept-art", "paintings", "photo")),
        },
        unique="prompt",
        notes="The URL of DanceGRPO's training prompt list could not be checked offline.",
    ),
    DatasetSpec(
        name="video_prompts",
        about="DanceGRPO's text-to-video prompts; the first 64 are held out for evaluation",
        presets=("flow_grpo_wan21",),
        outputs=(
            Output("video_test_prompts.jsonl", "train", rows=slice(0, 64)),
            Output("video_train_prompts.jsonl", "train", rows=slice(64, None)),
        ),
        convert=prompt_row,
        urls={"train": (f"{RAW_GITHUB}/XueZeyue/DanceGRPO/main/assets/video_prompts.txt",)},
        unique="prompt",
    ),
)

BY_NAME: dict[str, DatasetSpec] = {spec.name: spec for spec in DATASETS}
