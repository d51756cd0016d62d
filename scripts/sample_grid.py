"""Grid of evaluation samples for fixed held-out prompts and seeds, before or after training (flow family).

    python scripts/sample_grid.py configs/demo_shapes_flow_grpo.yaml --out before.png
    python scripts/sample_grid.py configs/demo_shapes_flow_grpo.yaml --checkpoint runs/demo_shapes_flow_grpo --out after.png

The prompts are the first ``--num-prompts`` distinct prompts of the config's ``data.eval`` source; each image is one
evaluation sample (``policy.eval_num_steps``, ODE, evaluation guidance) whose initial noise comes from
``--seed`` and the image's position only, so two grids made with the same arguments differ only by the weights.
Images are upscaled by ``--scale`` (nearest neighbour) and captioned with the prompt and the score of the config's
accuracy reward (``eval.accuracy_reward``, else the first reward).

``genalign sample CONFIG_OR_RUN --out DIR`` draws such grids too (several samples per prompt, any reward, the base
model beside the checkpoint with ``--compare base``); this script keeps the seeding of the committed before / after
grids (docs/images/shapes_before.png, shapes_after.png), one sample per prompt.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

import torch
from PIL import Image

from genalign.config import load_config
from genalign.data import load_rows
from genalign.policies import load_family
from genalign.sample_command import distinct_rows, draw_grid
from genalign.trainer.checkpoint import find_checkpoint, load_policy_weights
from genalign.trainer.rewards import RewardSet

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
    scores = table[:, rewards.labels.index(rewards.name_of(config.eval.accuracy_reward))].tolist()
    return rollout.outputs, scores


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
