"""``genalign sample CONFIG_OR_RUN``: samples of a checkpoint (or of the base model), optionally scored by the run's
rewards, printed as JSON lines; images also as one grid PNG, videos as PNG frames (and MP4 when an encoder is
installed).

The command, in stages (:func:`run_sample`):

1. **config**: a YAML config, or a run folder (its ``config.yaml``; ``latest`` then means that folder's newest
   checkpoint). It is validated without loading the rewards: they are loaded only with ``--score``, and one that
   cannot be loaded (a moved reward file, a reward model that is not there) is an error naming it.
   ``--temperature`` / ``--steps`` set the policy's sampling fields (``policy.temperature`` and
   ``policy.eval_temperature``; ``policy.num_steps`` and ``policy.eval_num_steps``) and are checked with the config.
2. **prompts**: ``--prompt`` (repeatable), else the first ``--num-prompts`` distinct prompts of ``data.eval`` (else
   ``data.train``), with their columns (the answer an exact-match reward reads). Checked before any model loads.
3. **policy**: the checkpoint's weights (``--checkpoint``; ``none``: the base model).
4. **sampling**: ``--num`` samples per prompt: one with the evaluation sampler (``policy.eval_*``, as ``genalign
   eval``), several with the training sampler (``policy.temperature``, ``policy.num_steps``), whose samples differ.
   The policy's random generators and the global ones are seeded from ``--seed`` (default ``eval.seed``) by
   :func:`genalign.trainer.evaluate.evaluation_randomness`, so the same command prints the same samples and scores.
   ``--compare base`` samples the base model first, then the checkpoint, with the same seed (the same noise).
5. **output**: one JSON line per sample on stdout (``prompt``, ``sample``, ``output``, ``rewards`` with ``--score``,
   ``checkpoint``; with ``--compare base``: ``base`` and ``trained`` columns, each ``{output, rewards}``), the mean
   rewards on stderr; with ``--out DIR`` also ``samples.jsonl``, and for images ``sample-<i>.png`` (``base-<i>.png``
   and ``trained-<i>.png`` with ``--compare base``),
   ``grid.png`` (a row per prompt and model, a column per sample, captioned with the prompt and the scores), for
   videos ``sample-<i>/frame-<k>.png`` and ``sample-<i>.mp4`` (``.gif`` without an MP4 encoder).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import textwrap
from pathlib import Path
from typing import TYPE_CHECKING, Any

from genalign.errors import UserError
from genalign.video_files import as_video, mp4_encoder
from genalign.video_files import write_video as write_video_file

if TYPE_CHECKING:
    from PIL import Image

    from genalign.config import RewardSpec, TrainConfig
    from genalign.policies.base import Policy

#: the sampler fields each flag sets, where the policy's config has them
SAMPLER_FLAGS = {"temperature": ("temperature", "eval_temperature"), "steps": ("num_steps", "eval_num_steps")}
CAPTION_CHARS = 22  # characters per caption line of the grid
LINE_HEIGHT = 12  # pixels per caption line (PIL's default bitmap font is ~11 px tall)


class SampleArgumentError(UserError, ValueError):
    """A ``genalign sample`` argument that cannot be used with this config; the message names the flag."""


def add_sample_arguments(p: argparse.ArgumentParser) -> None:
    """The flags of ``genalign sample`` (after CONFIG_OR_RUN and the overrides)."""
    p.add_argument("--prompt", action="append", default=[], help="a prompt (repeatable); default: held-out prompts")
    p.add_argument("--num-prompts", type=int, default=4,
                   help="without --prompt: this many distinct prompts of data.eval (else data.train), with their "
                   "columns (default 4)")  # fmt: skip
    p.add_argument("--image", action="append", default=[], help="an image file for the prompts (VLMs; repeatable)")
    p.add_argument("--num", type=int, default=1,
                   help="samples per prompt (1: the evaluation sampler; more: the training sampler)")  # fmt: skip
    p.add_argument("--seed", type=int, help="seed of the sampling noise (default: the config's eval.seed)")
    p.add_argument("--temperature", type=float, help="sampling temperature (policy.temperature, eval_temperature)")
    p.add_argument("--steps", type=int, help="denoising steps (flow: policy.num_steps, eval_num_steps)")
    p.add_argument("--score", action="store_true", help="score the samples with the config's rewards and print them")
    p.add_argument("--compare", choices=["base"], help="also sample the base model, with the same seed")
    p.add_argument("--checkpoint", help="a checkpoint folder, a run folder, 'latest' (default) or 'none' (base model)")
    p.add_argument("--out", help="folder for samples.jsonl, images (and grid.png) or video frames (required for flow)")
    p.add_argument("--fps", type=int, default=None,
                   help="frames per second of written videos (default: the policy's, policy.fps)")  # fmt: skip


# -- 1. config ------------------------------------------------------------------------------------------------------
def load_sampling_config(source: str, overrides: list[str], args: argparse.Namespace):
    """``(config, reward dicts, run folder or None)``: the validated config of ``source`` (a YAML file or a run folder)
    with the sampler flags applied, its rewards held aside unloaded (each replaced by a stand-in of the same name and
    weight for validation), and the run folder whose checkpoints ``latest`` means."""
    from genalign.config import ConfigError, TrainConfig, apply_overrides, from_dict, hold_rewards, read_config_data
    from genalign.runs import CONFIG_FILE

    path, run_dir = Path(source), None
    if path.is_dir():
        run_dir, path = path, path / CONFIG_FILE
        if not path.is_file():
            raise SampleArgumentError(
                f"{source}: a folder without {CONFIG_FILE}; give a run folder (the run.output_dir of a training run) "
                "or a YAML config."
            )
    data = read_config_data(path, list(overrides))
    held = hold_rewards(data)
    config = from_dict(TrainConfig, data)
    flags = _sampler_overrides(config, args)
    if flags:
        try:
            config = from_dict(TrainConfig, apply_overrides(data, flags))
        except ConfigError as err:
            raise SampleArgumentError(f"{' '.join(flags)} (from --temperature / --steps): {err}") from None
    return config, held, run_dir


def _sampler_overrides(config: TrainConfig, args: argparse.Namespace) -> list[str]:
    overrides = []
    for flag, fields in SAMPLER_FLAGS.items():
        value = getattr(args, flag)
        if value is None:
            continue
        present = [f for f in fields if hasattr(config.policy, f)]
        if not present:
            raise SampleArgumentError(
                f"--{flag} {value}: policy.family {config.policy.family!r} has no {' or '.join(fields)} setting; "
                f"drop --{flag}."
            )
        overrides += [f"policy.{f}={value}" for f in present]
    return overrides


def reward_specs(held: list[dict[str, Any]]) -> list[RewardSpec]:
    """The held-aside rewards as checked specs (types, file paths), not yet loaded."""
    from genalign.config import RewardSpec, from_dict

    return [from_dict(RewardSpec, r, f"rewards[{i}]") for i, r in enumerate(held)]


# -- 2. prompts -----------------------------------------------------------------------------------------------------
def distinct_rows(rows: list[dict[str, Any]], count: int) -> list[dict[str, Any]]:
    """The first ``count`` rows with distinct prompts (in source order)."""
    seen: dict[str, dict[str, Any]] = {}
    for row in rows:
        seen.setdefault(json.dumps(row["prompt"], sort_keys=True), row)
        if len(seen) == count:
            break
    return list(seen.values())


def sample_rows(config: TrainConfig, args: argparse.Namespace) -> list[dict[str, Any]]:
    """The rows to sample for, checked before any model loads."""
    from genalign.policies import family_traits

    traits = family_traits(config.policy)
    for flag in ("num", "num_prompts", "fps"):
        if getattr(args, flag) is not None and getattr(args, flag) < 1:
            raise SampleArgumentError(f"--{flag.replace('_', '-')} {getattr(args, flag)}: give at least 1.")
    if traits.media_samples and not args.out:
        raise SampleArgumentError("this policy produces images or videos; pass --out FOLDER to write them.")
    if args.image and not traits.image_inputs:
        raise SampleArgumentError(
            f"--image is for policies that take images; policy.family is {config.policy.family!r}."
        )
    if args.image and not args.prompt:
        raise SampleArgumentError("--image goes with --prompt; without --prompt the held-out rows bring their images.")
    for image in args.image:
        if not Path(image).is_file():
            raise SampleArgumentError(f"--image {image}: no such file.")
    from genalign.data.errors import LOCATION_KEY

    if args.prompt:
        column = getattr(config.policy, "image_column", "image")
        images = {column: list(args.image)} if args.image else {}
        return [{"prompt": prompt, LOCATION_KEY: f"--prompt {i}", **images} for i, prompt in enumerate(args.prompt, 1)]
    source = config.data.eval or config.data.train
    from genalign.data import load_rows

    return distinct_rows(load_rows(source), args.num_prompts)


# -- 4. sampling ----------------------------------------------------------------------------------------------------
def draw_samples(
    policy: Policy, rows: list[dict[str, Any]], num: int, seed: int
) -> tuple[list[Any], list[int], list[dict[str, Any]], dict[str, list[Any]]]:
    """``(outputs, prompt index of each, row of each, what describes the outputs)``: ``num`` samples per row under
    seeded randomness (the same seed gives the same samples). The rows are the rollout's: a multi-turn rollout adds
    each episode's ``environment_reward``, which the ``environment`` reward reads; the descriptions are the rollout's
    :meth:`~genalign.policies.base.Rollout.output_columns` (videos' ``fps``), which rewards receive as columns."""
    import torch

    from genalign.trainer.evaluate import evaluation_randomness

    for module in policy.modules_to_train():
        module.eval()
    with torch.no_grad(), evaluation_randomness(policy, seed), policy.evaluation_weights():
        rollout = policy.rollout(rows, num, mode="eval" if num == 1 else "train")
    return list(rollout.outputs), [int(g) for g in rollout.group_ids], list(rollout.rows), rollout.output_columns()


# -- 5. output ------------------------------------------------------------------------------------------------------
def draw_grid(images: list[Image.Image], captions: list[str], *, columns: int, scale: int) -> Image.Image:
    """Images upscaled by ``scale`` in a grid of ``columns``, each with its wrapped caption underneath (a caption's
    ``\\n`` starts a new line)."""
    from PIL import Image, ImageDraw, ImageFont

    font = ImageFont.load_default()
    width, height = images[0].size
    cell_w = max(width * scale, CAPTION_CHARS * 6 + 8)
    wrapped = [[w for part in c.split("\n") for w in textwrap.wrap(part, CAPTION_CHARS) or [""]] for c in captions]
    caption_h = LINE_HEIGHT * max(len(lines) for lines in wrapped) + 6
    cell_h = height * scale + caption_h
    rows = (len(images) + columns - 1) // columns
    grid = Image.new("RGB", (columns * cell_w, rows * cell_h), "white")
    draw = ImageDraw.Draw(grid)
    for index, (image, lines) in enumerate(zip(images, wrapped, strict=True)):
        x, y = (index % columns) * cell_w, (index // columns) * cell_h
        grid.paste(image.convert("RGB").resize((width * scale, height * scale), Image.NEAREST), (x + 4, y + 2))
        for number, line in enumerate(lines):
            draw.text((x + 4, y + height * scale + 4 + number * LINE_HEIGHT), line, fill="black", font=font)
    return grid


def write_video(frames: Any, folder: Path, name: str, fps: int) -> dict[str, str]:
    """A ``[F, H, W, 3]`` uint8 video as ``folder/name/frame-<k>.png`` and ``folder/name.mp4`` (``.gif`` without an
    MP4 encoder: :func:`genalign.video_files.write_video`); the written paths by kind (``frames``, ``mp4`` or ``gif``)."""
    import numpy as np
    from PIL import Image

    video = as_video(frames)
    (folder / name).mkdir(parents=True, exist_ok=True)
    for k, frame in enumerate(video):
        Image.fromarray(np.asarray(frame)).save(folder / name / f"frame-{k:03d}.png")
    clip = write_video_file(video, folder / name, fps=fps)
    return {"frames": str(folder / name), clip.suffix[1:]: str(clip)}


def _scores(table, names: list[str], i: int) -> dict[str, float | None]:
    """Sample ``i``'s rewards by name; NaN (not applicable, or the reward failed) -> None (JSON null)."""
    values = [float(v) for v in table[i]]
    return {n: (None if math.isnan(v) else round(v, 6)) for n, v in zip(names, values)}


def _caption(prompt: Any, side: str, scores: dict[str, float | None] | None) -> str:
    from genalign.trainer.rewards import prompt_text

    text = f"{side}: {prompt_text({'prompt': prompt})}" if side else prompt_text({"prompt": prompt})
    for name, value in (scores or {}).items():
        text += f"\n{name} {'n/a' if value is None else f'{value:.2f}'}"
    return text


def run_sample(args: argparse.Namespace) -> int:
    """``genalign sample``; 0 when done, 2 (by raising a user error) for an argument, config, checkpoint or reward
    that cannot be used."""
    config, held, run_dir = load_sampling_config(args.config, args.overrides, args)
    specs = reward_specs(held) if args.score else []
    rows = sample_rows(config, args)

    from genalign.runs import CONFIG_FILE, load_policy, resolve_checkpoint
    from genalign.trainer.checkpoint import CheckpointError

    try:
        checkpoint = resolve_checkpoint(args.checkpoint, output_dir=run_dir or config.run.output_dir)
    except (FileNotFoundError, ValueError, CheckpointError) as err:
        raise SampleArgumentError(str(err)) from None
    if args.compare == "base" and checkpoint is None:
        raise SampleArgumentError(
            "--compare base: there is no checkpoint to compare with the base model (no --checkpoint, and the run has "
            "none yet); give --checkpoint FOLDER or train first."
        )
    rewards = None
    if args.score:
        from genalign.trainer.rewards import RewardLoadError, RewardSet

        try:
            rewards = RewardSet(specs)
        except RewardLoadError as err:
            where = run_dir / CONFIG_FILE if run_dir is not None else args.config
            raise RewardLoadError(f"{err}. Fix it in {where}, or drop --score to sample without rewards.") from err

    seed = config.eval.seed if args.seed is None else args.seed
    sides = {"base": None, "trained": checkpoint} if args.compare == "base" else {"": checkpoint}
    policy, outputs, tables, groups, fps = None, {}, {}, [], args.fps
    for side, weights in sides.items():
        if policy is None:
            try:
                policy = load_policy(config, weights, verified=True)  # resolve_checkpoint verified it
            except CheckpointError as err:
                raise SampleArgumentError(str(err)) from None
        else:  # --compare base: the checkpoint's weights into the base policy
            from genalign.trainer.checkpoint import load_policy_weights

            load_policy_weights(Path(weights), policy, verified=True)
        outputs[side], groups, sampled_rows, described = draw_samples(policy, rows, args.num, seed)
        fps = args.fps or (described.get("fps") or [None])[0]  # --fps, else the rate the policy declares
        if rewards is not None:
            tables[side], failures = rewards.score_each(sampled_rows, outputs[side], **described)
            for name, failure in failures.items():
                print(f"genalign: reward {name!r} could not score the {side + ' ' if side else ''}samples ({failure}); "
                      "its scores are null", file=sys.stderr)  # fmt: skip
    _write(args, rows, groups, outputs, tables, rewards.labels if rewards else [], checkpoint, fps)
    return 0


def _write(args, rows, groups, outputs, tables, names, checkpoint, fps: int | None) -> None:
    """Stage 5: JSON lines, files under ``--out`` (videos at ``fps``), the mean rewards."""
    import torch

    out = Path(args.out) if args.out else None
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
    counter: dict[int, int] = {}
    lines, cells, videos = [], [], 0  # cells of the grid: (prompt index, side, sample index, image, caption)
    for i, group in enumerate(groups):
        j = counter[group] = counter.get(group, -1) + 1
        prompt = rows[group]["prompt"]
        record: dict[str, Any] = {"prompt": prompt, "sample": j}
        for side, side_outputs in outputs.items():
            output, entry = side_outputs[i], {}
            scores = _scores(tables[side], names, i) if side in tables else None
            stem = f"{side or 'sample'}-{i}"
            if isinstance(output, str):
                entry["output"] = output
            elif hasattr(output, "save"):  # an image
                output.save(out / f"{stem}.png")
                entry["output"] = str(out / f"{stem}.png")
                cells.append((group, list(outputs).index(side), j, output, _caption(prompt, side, scores)))
            else:  # a video: [F, H, W, 3] uint8
                entry["output"], videos = write_video(output, out, stem, fps), videos + 1
            if scores is not None:
                entry["rewards"] = scores
            if side:
                record[side] = entry
            else:
                record |= entry
        record["checkpoint"] = checkpoint or "base model"
        lines.append(json.dumps(record))
    print("\n".join(lines), flush=True)
    if out is not None:
        (out / "samples.jsonl").write_text("".join(line + "\n" for line in lines))
    if cells:
        cells.sort(key=lambda cell: cell[:3])  # by prompt, then base before trained, then sample
        scale = max(1, 128 // max(cells[0][3].size))
        draw_grid([c[3] for c in cells], [c[4] for c in cells], columns=args.num, scale=scale).save(out / "grid.png")
        rows_per_prompt = " (base row above the trained row)" if len(outputs) > 1 else ""
        print(f"genalign: {out / 'grid.png'}: a row per prompt{rows_per_prompt}, a column per sample", file=sys.stderr)
    if videos and mp4_encoder() is None:
        print("genalign: videos written as PNG frames and animated GIFs; for MP4 files install an encoder: "
              "pip install 'genalign[video]'", file=sys.stderr)  # fmt: skip
    for side, table in tables.items():
        means = [float(torch.nanmean(table[:, k])) for k in range(len(names))]
        text = ", ".join(f"{name} {'n/a' if math.isnan(m) else f'{m:.4g}'}" for name, m in zip(names, means))
        print(f"genalign: mean rewards of the {side + ' ' if side else ''}samples ({table.shape[0]}): {text}",
              file=sys.stderr)  # fmt: skip
