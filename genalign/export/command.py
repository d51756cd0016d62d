"""``genalign export RUN_OR_CHECKPOINT OUT [--merge-lora] [--dtype D] [--ema] [--overwrite]``.

Stages: check the arguments (before any model loads) → open the run or checkpoint (:mod:`genalign.runs`) → build the
policy from the checkpoint's config and restore its weights (:func:`genalign.trainer.checkpoint.load_policy_weights`,
which reads every checkpoint layout the trainer writes) → write the family's standard folder into a temporary sibling
of ``OUT`` → rename it into place. A failure at any stage leaves ``OUT`` as it was.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from genalign.errors import UserError

ExportDtype = Literal["float32", "bfloat16", "float16"]
DTYPE_CHOICES: tuple[ExportDtype, ...] = ("float32", "bfloat16", "float16")


class ExportError(UserError, ValueError):
    """An argument of ``genalign export`` that cannot be honoured; the message names it, its value and the fix."""


@dataclass(frozen=True)
class ExportResult:
    """Where the export went, what it holds (in words) and the checkpoint it came from."""

    out: Path
    written: str
    checkpoint: Path


def add_export_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments of ``genalign export`` (for its subparser)."""
    parser.add_argument("source", metavar="RUN_OR_CHECKPOINT",
                        help="a run folder (its newest verified checkpoint) or a checkpoint folder (OUTPUT_DIR/"
                        "checkpoints/step-N)")  # fmt: skip
    parser.add_argument("out", metavar="OUT", help="the folder to write (created; must be empty unless --overwrite)")
    parser.add_argument("--merge-lora", action="store_true",
                        help="fold LoRA adapters into the base weights (merged in float32) and write a full model: a "
                        "transformers folder, or a diffusers pipeline; default: the adapters alone (peft folder, or a "
                        "diffusers LoRA file)")  # fmt: skip
    parser.add_argument("--dtype", choices=DTYPE_CHOICES,
                        help="dtype of the written weights; default: as trained (base weights in policy.dtype, "
                        "adapters as trained; a merged model in policy.dtype)")  # fmt: skip
    parser.add_argument("--ema", action="store_true",
                        help="write the EMA of the weights (flow policies with policy.ema_decay > 0), the weights "
                        "evaluation and `genalign sample` use, instead of the trained weights")  # fmt: skip
    parser.add_argument("--overwrite", action="store_true", help="replace OUT when it is not empty")


def run_export(args: argparse.Namespace) -> int:
    """The command: export, print what was written; 2 with a one-line error for an argument that cannot be used."""
    from genalign.config import ConfigError
    from genalign.trainer.checkpoint import CheckpointError

    try:
        result = export(
            args.source, args.out, merge_lora=args.merge_lora, dtype=args.dtype, ema=args.ema, overwrite=args.overwrite
        )
    except (ExportError, ConfigError, CheckpointError, FileNotFoundError) as err:
        print(f"genalign export: {err}", file=sys.stderr)
        return 2
    print(f"wrote {result.out}: {result.written} (from {result.checkpoint})")
    return 0


def export(
    source: str | Path,
    out: str | Path,
    *,
    merge_lora: bool = False,
    dtype: ExportDtype | None = None,
    ema: bool = False,
    overwrite: bool = False,
) -> ExportResult:
    """Export the checkpoint ``source`` (a run folder or a checkpoint folder) to the standard folder ``out`` (module
    docstring); the arguments mean what the command's options mean."""
    from genalign.runs import open_run_or_checkpoint

    out = Path(out).expanduser().absolute()
    if dtype is not None and dtype not in DTYPE_CHOICES:
        raise ExportError(f"--dtype {dtype}: unknown dtype; use one of {', '.join(DTYPE_CHOICES)}.")
    _check_out(out, overwrite=overwrite)
    config, checkpoint = open_run_or_checkpoint(str(source), argument="RUN_OR_CHECKPOINT")
    if out == checkpoint.absolute() or checkpoint.absolute() in out.parents:
        raise ExportError(
            f"OUT {out}: inside the checkpoint it exports (that would break its manifest); write elsewhere."
        )
    _check_options(config.policy, merge_lora=merge_lora, ema=ema)
    written, target = _write_atomically(config, checkpoint, out, merge_lora=merge_lora, dtype=dtype, ema=ema)
    return ExportResult(out=target, written=written, checkpoint=checkpoint)


def _check_out(out: Path, *, overwrite: bool) -> None:
    if out.exists() and not out.is_dir():
        raise ExportError(f"OUT {out}: a file is in the way; give a folder path.")
    if out.is_dir() and any(out.iterdir()) and not overwrite:
        raise ExportError(f"OUT {out}: the folder is not empty; give a new folder, or pass --overwrite to replace it.")


def _check_options(policy_config: Any, *, merge_lora: bool, ema: bool) -> None:
    """``--merge-lora`` needs adapters, ``--ema`` an EMA of the weights (checked before any model loads)."""
    if merge_lora and policy_config.lora.rank == 0:
        raise ExportError(
            "--merge-lora: this run trained every weight (no LoRA adapters), so there is nothing to merge; drop "
            "--merge-lora (the export is a full model anyway)."
        )
    if ema and getattr(policy_config, "ema_decay", 0.0) <= 0:
        raise ExportError(
            f"--ema: the {policy_config.family} policy of this run keeps no EMA of its weights (policy.ema_decay is "
            "0 or absent); drop --ema to export the trained weights."
        )


def _write_atomically(
    config: Any, checkpoint: Path, out: Path, *, merge_lora: bool, dtype: ExportDtype | None, ema: bool
) -> tuple[str, Path]:
    """Build the policy, write into ``.OUT.tmp-PID`` next to ``out`` and rename it into place (the previous ``out``,
    if any, is moved aside first and deleted last)."""
    import torch

    from genalign.policies.base import DTYPES
    from genalign.runs import load_policy

    target_dtype = DTYPES[dtype] if dtype is not None else None
    if merge_lora:  # merge in float32 (one rounding, to the written dtype), write in the run's dtype by default
        target_dtype = target_dtype or DTYPES[config.policy.dtype]
        config.policy.dtype = "float32"
    policy = load_policy(config, checkpoint, verified=True)  # open_run_or_checkpoint verified it
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp, aside = (out.with_name(f".{out.name}.{kind}-{os.getpid()}") for kind in ("tmp", "old"))
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    try:
        with torch.no_grad(), policy.evaluation_weights() if ema else nullcontext():
            written = _writer(config.policy)(policy, tmp, merge_lora=merge_lora, dtype=target_dtype)
        if out.exists():
            out.rename(aside)
        tmp.rename(out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        if aside.exists() and not out.exists():
            aside.rename(out)
        raise
    shutil.rmtree(aside, ignore_errors=True)
    return written, out


#: a family's ``traits.export_format`` -> ``"module:function"`` writing its standard folder
WRITERS: dict[str, str] = {
    "token_lm": "genalign.export.token_lm:write_token_lm",
    "diffusers": "genalign.export.flow:write_flow",
}


def _writer(policy_config: Any) -> Callable[..., str]:
    """The folder writer of the family's export format (:data:`WRITERS`)."""
    import importlib

    from genalign.policies import family_traits

    module, _, function = WRITERS[family_traits(policy_config).export_format].partition(":")
    return getattr(importlib.import_module(module), function)
