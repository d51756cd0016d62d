"""Procedural image editing on the shapes world: a source scene, an instruction, and the scene the edit should give.

Three edits, each on a scene whose shapes all have different colours (so an instruction names one shape without
ambiguity and a verifier can match shapes by colour):

- ``recolor``: ``"make the red circle blue"`` (the new colour is not in the scene);
- ``add``: ``"add a green square"`` (a colour not in the scene; anywhere that is free);
- ``remove``: ``"remove the red circle"`` (scenes of at least two shapes, so the result is never empty).

Rows (:func:`shapes_edit_rows`, the procedural task ``shapes_edit``) hold the instruction as ``prompt``, the rendered
source as ``image`` (a ``PIL.Image``, the column flow policies read with ``policy.source_column``) and the structured
``edit`` the rewards check (:mod:`genalign.rewards.image_edit`): the edit kind, the target shapes (boxes in canvas
pixels; the added shape's box is where this generator would put it, not a requirement), the shape the edit touches,
the source region it may change and the canvas size. Boxes are ``[x0, y0, x1, y1]``, exclusive ends.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from genalign.data.procedural import PROCEDURAL_TASKS, Split, split_of
from genalign.data.shapes import KINDS, PALETTE, Scene, Shape, _place, describe, render, sample_scene

EDITS: tuple[str, ...] = ("recolor", "add", "remove")


def _shape_dict(shape: Shape, *, placed: bool = True) -> dict[str, Any]:
    """A shape as a row holds it; ``placed`` False: its position is free (an added shape)."""
    return {"color": shape.color, "kind": shape.kind, "box": list(shape.box), "placed": placed}


def _distinct_colour_scene(rng: np.random.Generator, size: int, count: int) -> Scene:
    """A scene of ``count`` shapes of different colours and random kinds."""
    colours = [str(c) for c in rng.choice(list(PALETTE), size=count, replace=False)]
    for _ in range(100):
        base = sample_scene(rng, size=size, template="count", colors=colours[:1], max_count=1)
        side_lo, side_hi = max(5, round(0.28 * size)), max(5, round(0.36 * size))
        sides = [int(rng.integers(side_lo, side_hi + 1)) for _ in range(count - 1)]
        boxes = _place(rng, size, sides, [base.shapes[0].box], 1)
        if boxes is None:
            continue
        others = [Shape(KINDS[int(rng.integers(len(KINDS)))], c, b) for c, b in zip(colours[1:], boxes)]
        return Scene(size=size, shapes=(base.shapes[0], *others))
    raise RuntimeError(f"could not place {count} shapes on a {size}px canvas")


def sample_edit(rng: np.random.Generator, edit: str, *, size: int = 32, max_shapes: int = 3) -> dict[str, Any]:
    """One edit of kind ``edit``: ``{"instruction", "source" (Scene), "edit" (the row's structured column)}``."""
    if edit not in EDITS:
        raise ValueError(f"edit={edit!r} is not one of {EDITS}")
    for _ in range(100):
        drawn = _draw_edit(rng, edit, size, max_shapes)
        if drawn is not None:
            return drawn
    raise RuntimeError(f"could not draw a {edit!r} edit on a {size}px canvas with up to {max_shapes} shapes")


def _draw_edit(rng: np.random.Generator, edit: str, size: int, max_shapes: int) -> dict[str, Any] | None:
    """:func:`sample_edit`'s draw, or None when the added shape finds no free room."""
    low = 2 if edit == "remove" else 1
    count = int(rng.integers(low, max_shapes + 1))
    source = _distinct_colour_scene(rng, size, count)
    shapes = list(source.shapes)
    free = [c for c in PALETTE if c not in {s.color for s in shapes}]
    touched = int(rng.integers(len(shapes)))
    region: list[int] | None = list(shapes[touched].box)
    if edit == "recolor":
        new = free[int(rng.integers(len(free)))]
        old = shapes[touched]
        instruction = f"make the {old.color} {old.kind} {new}"
        shapes[touched] = Shape(old.kind, new, old.box)
        target = [_shape_dict(s) for s in shapes]
        changed = _shape_dict(shapes[touched])
    elif edit == "remove":
        gone = shapes.pop(touched)
        instruction = f"remove the {gone.color} {gone.kind}"
        target = [_shape_dict(s) for s in shapes]
        changed = _shape_dict(gone)
    else:
        colour, kind = free[int(rng.integers(len(free)))], KINDS[int(rng.integers(len(KINDS)))]
        side = int(rng.integers(max(5, round(0.28 * size)), max(5, round(0.36 * size)) + 1))
        boxes = _place(rng, size, [side], [s.box for s in shapes], 1)
        if boxes is None:
            return None
        added = Shape(kind, colour, boxes[0])
        instruction = f"add a {colour} {kind}"
        target = [_shape_dict(s) for s in shapes] + [_shape_dict(added, placed=False)]
        changed, region = _shape_dict(added, placed=False), None
    return {
        "instruction": instruction,
        "source": source,
        "edit": {"kind": edit, "target": target, "changed": changed, "region": region, "canvas": size},
    }


def edit_split(drawn: dict[str, Any], *, eval_fraction: float = 0.2) -> Split:
    """The split of an edit drawn by :func:`sample_edit`: :func:`~genalign.data.procedural.split_of` of its instruction
    and its source scene together."""
    key = f"{drawn['instruction']} | {describe(drawn['source'])} | {drawn['source'].shapes}"
    return split_of(key, eval_fraction=eval_fraction)


@PROCEDURAL_TASKS.register("shapes_edit", source="genalign")
def shapes_edit_rows(
    size: int,
    seed: int,
    *,
    split: Split = "train",
    eval_fraction: float = 0.2,
    edits: list[str] | tuple[str, ...] = EDITS,
    canvas: int = 32,
    image_size: int = 32,
    max_shapes: int = 3,
) -> list[dict[str, Any]]:
    """``size`` editing rows of the shapes world (module docstring), edits drawn uniformly from ``edits``.

    A row is ``{"prompt": instruction, "image": PIL source, "edit": {...}, "edit_kind": str, "split": str}``. The split
    is :func:`~genalign.data.procedural.split_of` of the instruction and the source's description together, so a
    held-out row is an (instruction, scene) pair never trained on, whatever the seed.
    """
    edits = tuple(edits)
    if not isinstance(size, int) or size < 1:
        raise ValueError(f"shapes_edit: size={size!r} must be a positive integer; set args.size.")
    if split not in ("train", "eval"):
        raise ValueError(f"shapes_edit: split={split!r} must be 'train' or 'eval'.")
    if not 0.0 < eval_fraction < 1.0:
        raise ValueError(f"shapes_edit: eval_fraction={eval_fraction!r} must be strictly between 0 and 1.")
    if not edits or any(e not in EDITS for e in edits):
        raise ValueError(f"shapes_edit: edits={list(edits)!r} must be a non-empty subset of {list(EDITS)}.")
    if not 2 <= max_shapes <= 3:
        raise ValueError(f"shapes_edit: max_shapes={max_shapes!r} must be 2 or 3 (four colours, one left free).")
    if canvas < 16 or image_size < canvas:
        raise ValueError(f"shapes_edit: need canvas >= 16 and image_size >= canvas; got {canvas}, {image_size}.")
    rng = np.random.default_rng(seed)
    rows: list[dict[str, Any]] = []
    for _ in range(1000 * (size + 10)):
        drawn = sample_edit(rng, edits[int(rng.integers(len(edits)))], size=canvas, max_shapes=max_shapes)
        if edit_split(drawn, eval_fraction=eval_fraction) != split:
            continue
        rows.append({
            "prompt": drawn["instruction"],
            "image": render(drawn["source"], size=image_size),
            "edit": drawn["edit"],
            "edit_kind": drawn["edit"]["kind"],
            "split": split,
        })  # fmt: skip
        if len(rows) == size:
            return rows
    raise RuntimeError(f"shapes_edit: could not draw {size} {split} rows")


def render_target(edit: dict[str, Any], size: int | None = None) -> Any:
    """The scene an edit asks for, rendered (``size`` pixels; default the canvas): the verifier's reference answer."""
    shapes = tuple(Shape(s["kind"], s["color"], tuple(s["box"])) for s in edit["target"])
    return render(Scene(size=edit["canvas"], shapes=shapes), size=size)


def applied_fraction(outputs: list[Any], rows: list[dict[str, Any]]) -> float:
    """How far ``outputs`` carry out the edits of ``rows``: the least-squares ``a`` in ``output - source ~ a (target -
    source)`` over all pixels of all rows (1: every edit done exactly as :func:`render_target` draws it; 0: the
    sources returned unchanged). Outputs and sources are RGB images of the canvas size (PIL or ``[H, W, 3]`` arrays)."""
    done = wanted_norm = 0.0
    for output, row in zip(outputs, rows, strict=True):
        source = np.asarray(row["image"], dtype=np.float64)  # [H, W, 3]
        change = np.asarray(output, dtype=np.float64) - source
        wanted = np.asarray(render_target(row["edit"], size=source.shape[0]), dtype=np.float64) - source
        done += float((change * wanted).sum())
        wanted_norm += float((wanted * wanted).sum())
    if wanted_norm == 0:
        raise ValueError("applied_fraction: the rows ask for no change (every target equals its source)")
    return done / wanted_norm
