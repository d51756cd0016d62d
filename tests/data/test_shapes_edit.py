"""The procedural editing task of the shapes world: deterministic rows, disjoint splits, scenes whose colours name
their shapes, edits whose target differs from the source and is never empty."""

from __future__ import annotations

import numpy as np
import pytest

from genalign.data import DataSourceConfig, load_rows
from genalign.data.shapes import detect
from genalign.data.shapes_edit import applied_fraction, render_target, shapes_edit_rows


def test_rows_are_deterministic_and_the_splits_disjoint():
    a, b = shapes_edit_rows(40, 5), shapes_edit_rows(40, 5)
    assert [r["prompt"] for r in a] == [r["prompt"] for r in b] and [r["edit"] for r in a] == [r["edit"] for r in b]
    assert all(np.array_equal(np.asarray(x["image"]), np.asarray(y["image"])) for x, y in zip(a, b))
    train = {(r["prompt"], str(r["edit"])) for r in shapes_edit_rows(200, 1)}
    held_out = {(r["prompt"], str(r["edit"])) for r in shapes_edit_rows(60, 2, split="eval")}
    assert not train & held_out


def test_each_edit_changes_the_scene_the_instruction_names():
    for row in shapes_edit_rows(90, 0):
        edit, found = row["edit"], detect(row["image"])
        colours = [s.color for s in found]
        assert len(colours) == len(set(colours)), "shapes of a scene have different colours"
        target = [(s["color"], s["kind"]) for s in edit["target"]]
        assert target and sorted(target) != sorted((s.color, s.kind) for s in found)
        words = row["prompt"].split()
        if edit["kind"] == "recolor":
            assert words[:2] == ["make", "the"] and words[-1] == edit["changed"]["color"] not in colours
        elif edit["kind"] == "add":
            assert words[:2] == ["add", "a"] and edit["changed"]["color"] not in colours
        else:
            assert words[:2] == ["remove", "the"] and len(found) >= 2
        assert sorted((s.color, s.kind) for s in detect(render_target(edit))) == sorted(target)


def test_the_procedural_task_and_its_argument_errors():
    rows = load_rows(
        DataSourceConfig(source="procedural:shapes_edit", args={"size": 6, "seed": 0, "edits": ["remove"]})
    )
    assert len(rows) == 6 and {r["edit_kind"] for r in rows} == {"remove"}
    with pytest.raises(ValueError, match=r"shapes_edit: edits=\['crop'\] must be a non-empty subset"):
        shapes_edit_rows(4, 0, edits=["crop"])


def test_applied_fraction_of_blends_between_source_and_target():
    rows = shapes_edit_rows(6, 0)
    blend = lambda a: [  # noqa: E731
        np.asarray(r["image"], dtype=np.float64) * (1 - a) + np.asarray(render_target(r["edit"]), dtype=np.float64) * a
        for r in rows
    ]
    assert applied_fraction(blend(0.0), rows) == pytest.approx(0.0, abs=1e-12)
    assert applied_fraction(blend(0.4), rows) == pytest.approx(0.4)
    assert applied_fraction(blend(1.0), rows) == pytest.approx(1.0)
    # one row edited fully, the other source returned: weighted by how many pixels each edit changes
    source, target = (np.asarray(x, dtype=np.float64) for x in (rows[0]["image"], render_target(rows[0]["edit"])))
    other = np.asarray(rows[1]["image"], dtype=np.float64)
    n0 = ((target - source) ** 2).sum()
    n1 = ((np.asarray(render_target(rows[1]["edit"]), dtype=np.float64) - other) ** 2).sum()
    assert applied_fraction([target, other], rows[:2]) == pytest.approx(n0 / (n0 + n1))
