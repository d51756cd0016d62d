"""``row_label``: a dataset column's label as a number (its position in ``values``, a number as it is, or a stable
hash of other values), for options that group samples by a label of their row (DRPO's domains [25])."""

from __future__ import annotations

import zlib

import pytest

from genalign.rewards import REWARDS
from genalign.rewards.labels import ID_RANGE, label_id


def test_labels_map_to_positions_numbers_or_stable_ids():
    by_position = REWARDS.get("row_label")(column="domain", values=["ecg", "xray"])
    assert by_position(["p"] * 3, ["c"] * 3, domain=["xray", "ecg", None]) == [1.0, 0.0, None]
    hashed = REWARDS.get("row_label")(column="domain")
    ids = hashed(["p"] * 3, ["c"] * 3, domain=["xray", 7, 2.5])
    assert ids == [float(zlib.crc32(b"xray") % ID_RANGE), 7.0, 2.5]
    assert label_id("xray") == ids[0] and 0 <= ids[0] < 2**24  # exact in a float32 reward table


def test_unknown_labels_and_missing_columns_are_named():
    with pytest.raises(ValueError, match="holds 'mri', which is not one of values"):
        REWARDS.get("row_label")(column="domain", values=["ecg"])(["p"], ["c"], domain=["mri"])
    with pytest.raises(ValueError, match="needs the dataset column 'domain'"):
        REWARDS.get("row_label")(column="domain")(["p"], ["c"])
    with pytest.raises(ValueError, match="column=''"):
        REWARDS.get("row_label")(column="")
