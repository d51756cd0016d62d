"""Figures of the editing demo (``configs/demo_shapes_edit_grpo.yaml``): the held-out accuracy curve of a run and a
before / after grid (source image, the base model's edit, the trained model's edit) on fixed held-out rows.

    python benchmarks/edit_demo_figures.py runs/demo_shapes_edit_grpo --curve docs/images/edit_curve.png \
        --grid docs/images/edit_before_after.png

The grid samples as the run evaluates (one ODE sample per row, initial noise from ``--seed``), with the base weights
and with the run's latest checkpoint; each caption says whether the ``shapes_edit`` verifier (colours and places)
passes.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

import torch  # noqa: E402

CONFIG = ROOT / "configs" / "demo_shapes_edit_grpo.yaml"


def curve(run: Path, out: Path) -> list[tuple[int, float]]:
    """Plot ``eval/accuracy`` (``run/eval.jsonl``) and the training reward (``run/metrics.jsonl``) against the step;
    returns the evaluation points."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    def read(name: str) -> list[dict]:
        return [json.loads(line) for line in (run / name).read_text().splitlines()]

    points = [(int(r["step"]), float(r["eval/accuracy"])) for r in read("eval.jsonl") if "eval/accuracy" in r]
    records = read("metrics.jsonl")
    train = [(int(r["step"]), float(r["reward/partial/mean"])) for r in records if "reward/partial/mean" in r]
    fig, ax = plt.subplots(figsize=(5, 3.2))
    ax.plot(*zip(*points), marker="o", label="held-out edit accuracy (256 rows)")
    if train:
        ax.plot(*zip(*train), alpha=0.4, label="training reward (partial credit)")
    ax.set_xlabel("GRPO step")
    ax.set_ylim(0, 1)
    ax.legend(loc="lower right", fontsize=8)
    ax.set_title("Flow-GRPO editing on shapes-edit-weak (2 CPU cores)", fontsize=9)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    return points


def grid(run: Path, out: Path, *, rows: int, seed: int) -> dict[str, float]:
    """Sources, base edits and trained edits of the first ``rows`` held-out rows, one grid row each."""
    from PIL import Image
    from sample_grid import sample

    from genalign.config import load_config
    from genalign.data import load_rows
    from genalign.sample_command import draw_grid

    config = load_config(CONFIG)
    data = load_rows(config.data.eval)[:rows]
    before, before_scores = sample(config, data, None, seed)
    after, after_scores = sample(config, data, str(run), seed)
    images = [r["image"] for r in data] + before + after
    captions = [f"source: {r['prompt']}" for r in data]
    captions += [f"base {'OK' if s >= 1 else 'x'}" for s in before_scores]
    captions += [f"GRPO {'OK' if s >= 1 else 'x'}" for s in after_scores]
    picture = draw_grid(images, captions, columns=rows, scale=4)
    out.parent.mkdir(parents=True, exist_ok=True)
    picture.convert("P", palette=Image.ADAPTIVE, colors=64).save(out, optimize=True)
    return {"before": sum(before_scores) / rows, "after": sum(after_scores) / rows}


def breakdown(run: Path) -> dict[str, dict[str, float]]:
    """The base and trained models on all held-out rows of the preset, one ODE sample per row sampled as the grid is
    (the policy's generator seeded with ``eval.seed``; not necessarily the trainer's evaluation noise): accuracy, per
    edit kind, and how far the edits are carried out (:func:`~genalign.data.shapes_edit.applied_fraction`)."""
    from sample_grid import sample

    from genalign.config import load_config
    from genalign.data import load_rows
    from genalign.data.shapes_edit import EDITS, applied_fraction

    config = load_config(CONFIG)
    data = load_rows(config.data.eval)
    result = {}
    for label, checkpoint in (("base", None), ("GRPO", str(run))):
        images, scores = sample(config, data, checkpoint, config.eval.seed)
        by_kind = {e: [s for s, r in zip(scores, data) if r["edit_kind"] == e] for e in EDITS}
        result[label] = {"accuracy": sum(scores) / len(scores), "applied_fraction": applied_fraction(images, data)}
        result[label] |= {e: sum(v) / len(v) for e, v in by_kind.items() if v}
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run", type=Path, help="the run's output_dir")
    parser.add_argument("--curve", type=Path, required=True)
    parser.add_argument("--grid", type=Path, required=True)
    parser.add_argument("--rows", type=int, default=8)
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--breakdown", action="store_true", help="per edit kind, on all held-out rows (slower)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    print("curve", curve(args.run, args.curve))
    print("grid accuracy", grid(args.run, args.grid, rows=args.rows, seed=args.seed))
    if args.breakdown:
        for label, numbers in breakdown(args.run).items():
            print(label, {k: round(v, 3) for k, v in numbers.items()})


if __name__ == "__main__":
    main()
