"""Grid of evaluation samples for fixed held-out prompts and seeds, before or after training (flow family).

    python scripts/sample_grid.py configs/demo_shapes_flow_grpo.yaml --out before.png
    python scripts/sample_grid.py configs/demo_shapes_flow_grpo.yaml --checkpoint runs/demo_shapes_flow_grpo --out after.png

The prompts are the first ``--num-prompts`` distinct prompts of the config's ``data.eval`` source; each image is one
evaluation sample (``policy.eval_num_steps``, ODE, evaluation guidance) whose initial noise comes from
``--seed`` and the image's position only, so two grids made with the same arguments differ only by the weights.
Images are upscaled by ``--scale`` (nearest neighbour) and captioned with the prompt and the score of the config's
accuracy reward (``eval.accuracy_reward``, else the first reward).
"""

from __future__ import annotations

import argparse
import os
import sys
import textwrap
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

import torch
from PIL import Image, ImageDraw, ImageFont

from genalign.config import load_config
from genalign.data import load_rows
from genalign.policies import load_family
from genalign.trainer.checkpoint import find_checkpoint, load_policy_weights
from genalign.trainer.rewards import RewardSet

CAPTION_CHARS = 22  # characters per caption line
LINE_HEIGHT = 12  # pixels per caption line (PIL's default bitmap font is ~11 px tall)
PALETTE_COLORS = 64  # the PNG is saved with an adaptive palette of this many colours (small files)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("config", help="training YAML (policy.family must be 'flow')")
    parser.add_argument("overrides", nargs="*", help="key.path=value overrides, as for `genalign train`")
    parser.add_argument(
        "--checkpoint",
        default=None,
        help="a checkpoint directory (step-N) or a run output_dir (its latest checkpoint); omit for the base model",
    )
    parser.add_argument("--out", required=True, help="output PNG path")
    parser.add_argument("--num-prompts", type=int, default=16, help="distinct held-out prompts (one image each)")
    parser.add_argument("--columns", type=int, default=8, help="images per grid row")
    parser.add_argument("--scale", type=int, default=4, help="nearest-neighbour upscaling factor of each image")
    parser.add_argument("--seed", type=int, default=1234, help="seed of the initial noise")
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    args = parser.parse_args(argv)
    for name in ("num_prompts", "columns", "scale", "threads"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')}={getattr(args, name)} must be >= 1")
    return args


def distinct_rows(rows: list[dict[str, Any]], count: int) -> list[dict[str, Any]]:
    """The first ``count`` rows with distinct prompts (in source order)."""
    seen: dict[str, dict[str, Any]] = {}
    for row in rows:
        seen.setdefault(row["prompt"], row)
        if len(seen) == count:
            break
    return list(seen.values())


def checkpoint_dir(path: str) -> Path:
    """A complete checkpoint directory, given one or a run output_dir (then its latest checkpoint)."""
    candidate = Path(path)
    if (candidate / "COMPLETE").exists():
        return candidate
    return find_checkpoint(candidate, "latest").path


def sample(config, rows: list[dict[str, Any]], checkpoint: str | None, seed: int) -> tuple[list[Any], list[float]]:
    """Evaluation samples (one per row, fixed noise) and their accuracy-reward scores."""
    if config.policy.family != "flow":
        raise ValueError(f"policy.family={config.policy.family!r}: sample_grid.py draws images of the 'flow' family.")
    policy = load_family("flow").build_policy(config.policy, "cpu")
    if checkpoint is not None:
        load_policy_weights(checkpoint_dir(checkpoint), policy)  # weights and EMA (used by evaluation rollouts)
    policy.model.generator.manual_seed(seed)
    for module in policy.modules_to_train():
        module.eval()
    with torch.no_grad(), policy.evaluation_weights():
        rollout = policy.rollout(rows, 1, mode="eval")
    rewards = RewardSet(config.rewards)
    table, _ = rewards(rollout.rows, rollout.outputs)  # [N, K]
    label = config.eval.accuracy_reward or rewards.labels[0]
    scores = table[:, rewards.labels.index(label)].tolist()
    return rollout.outputs, scores


def draw_grid(images: list[Image.Image], captions: list[str], *, columns: int, scale: int) -> Image.Image:
    """Images upscaled by ``scale`` in a grid of ``columns``, each with its wrapped caption underneath."""
    font = ImageFont.load_default()
    width, height = images[0].size
    cell_w = max(width * scale, CAPTION_CHARS * 6 + 8)
    wrapped = [textwrap.wrap(c, CAPTION_CHARS) or [""] for c in captions]
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


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    config = load_config(args.config, args.overrides)
    if config.data.eval is None:
        raise ValueError(f"{args.config}: data.eval is missing; the grid uses held-out prompts from it.")
    rows = distinct_rows(load_rows(config.data.eval), args.num_prompts)
    images, scores = sample(config, rows, args.checkpoint, args.seed)
    captions = [f"{'OK' if score >= 1 else 'x'} {row['prompt']}" for row, score in zip(rows, scores, strict=True)]
    grid = draw_grid(images, captions, columns=min(args.columns, len(images)), scale=args.scale)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    grid.convert("P", palette=Image.ADAPTIVE, colors=PALETTE_COLORS).save(args.out, optimize=True)
    print(f"{args.out}: {len(images)} samples, mean accuracy {sum(scores) / len(scores):.3f}")


if __name__ == "__main__":
    main()
