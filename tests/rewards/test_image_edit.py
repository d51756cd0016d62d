"""The shapes-world editing rewards: the verifier passes the edit's target and fails the two forgeries (the source
returned unchanged, a blank image), also with partial credit; source consistency against hand-computed values."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from genalign.data.shapes import detect
from genalign.data.shapes_edit import render_target, shapes_edit_rows
from genalign.rewards.image_edit import ShapesEdit, SourceConsistency, preserved_mask

ROWS = shapes_edit_rows(120, 3)


def _columns(rows):
    return {"edit": [r["edit"] for r in rows], "image": [r["image"] for r in rows]}


@pytest.mark.parametrize("partial_credit", [False, True])
def test_the_target_passes_and_neither_the_unchanged_source_nor_a_blank_image_earns_anything(partial_credit):
    verifier, prompts = ShapesEdit(partial_credit=partial_credit), [r["prompt"] for r in ROWS]
    assert {r["edit_kind"] for r in ROWS} == {"recolor", "add", "remove"}
    assert verifier(prompts, [render_target(r["edit"]) for r in ROWS], **_columns(ROWS)) == [1.0] * len(ROWS)
    assert verifier(prompts, [render_target(r["edit"], 64) for r in ROWS], **_columns(ROWS)) == [1.0] * len(ROWS)
    assert verifier(prompts, [r["image"] for r in ROWS], **_columns(ROWS)) == [0.0] * len(ROWS)
    blank = [Image.new("RGB", (32, 32), (255, 255, 255))] * len(ROWS)
    assert verifier(prompts, blank, **_columns(ROWS)) == [0.0] * len(ROWS)


def test_partial_credit_counts_the_kept_shapes_once_the_edit_is_done():
    """Recolour in a 3-shape scene, one kept shape moved away: edit done, kept criteria 1 of 2 shapes + "no extra"."""
    row = next(r for r in ROWS if r["edit_kind"] == "recolor" and len(r["edit"]["target"]) == 3)
    edit = row["edit"]
    moved = [dict(s) for s in edit["target"]]
    kept = next(i for i, s in enumerate(moved) if s["color"] != edit["changed"]["color"])
    x0, y0, x1, y1 = moved[kept]["box"]
    dx = 12 if x0 < 16 else -12
    moved[kept]["box"] = [x0 + dx, y0, x1 + dx, y1]
    image = render_target({**edit, "target": moved})
    if len(detect(image)) != 3:
        pytest.skip("the moved shape overlaps another one in this scene")
    score = ShapesEdit(partial_credit=True)([row["prompt"]], [image], **_columns([row]))
    assert score == [pytest.approx(2 / 3)]
    assert ShapesEdit()([row["prompt"]], [image], **_columns([row])) == [0.0]


def test_source_consistency_is_one_minus_the_mean_difference_over_the_preserved_pixels():
    edit = {"kind": "remove", "canvas": 8, "region": [0, 0, 4, 4], "changed": {}, "target": []}
    mask = preserved_mask(edit, 8, margin=0)
    assert mask.sum() == 64 - 16 and not mask[:4, :4].any()
    source = np.full((8, 8, 3), 255, dtype=np.uint8)
    output = source.copy()
    output[:4, :4] = 0  # inside the edited region: free
    output[7, 7] = 0  # one preserved pixel off by 255 in every channel
    score = SourceConsistency(margin=0)(["p"], [output], edit=[edit], image=[Image.fromarray(source)])
    assert score == [pytest.approx(1 - 1 / 48)]
    added = {"kind": "add", "canvas": 8, "region": None, "changed": {}, "target": [
        {"color": "red", "kind": "square", "box": [4, 4, 6, 6], "placed": True},
        {"color": "blue", "kind": "square", "box": [0, 0, 2, 2], "placed": False},
    ]}  # fmt: skip
    assert np.argwhere(preserved_mask(added, 8, margin=1)).tolist() == [
        [y, x] for y in range(3, 7) for x in range(3, 7)
    ]


def test_a_batch_without_the_edit_column_names_it():
    with pytest.raises(ValueError, match=r"reward 'shapes_edit' needs the dataset column 'edit'"):
        ShapesEdit()(["p"], [ROWS[0]["image"]], image=[ROWS[0]["image"]])
