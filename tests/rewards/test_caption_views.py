"""MV-GRPO [63] caption views: the inner reward sees the view caption instead of the prompt."""

import pytest

from genalign.rewards import REWARDS


def _prompt_length(prompts, completions, **columns):
    return [float(len(p)) for p in prompts]


def test_view_column_and_template_replace_the_prompt():
    by_view = REWARDS.get("caption_view")(reward=f"{__name__}:_prompt_length", view=1)
    scores = by_view(["ab", "cd"], [None, None], views=[["x", "yyy"], ["z"]])
    assert scores == [3.0, None]  # row 2 has no second view
    by_template = REWARDS.get("caption_view")(reward=f"{__name__}:_prompt_length", template="a {prompt}!")
    assert by_template(["ab"], [None]) == [5.0]


def test_bad_arguments_are_rejected():
    with pytest.raises(ValueError, match="exactly one"):
        REWARDS.get("caption_view")(reward="exact_match")
    with pytest.raises(ValueError, match="views"):
        REWARDS.get("caption_view")(reward=f"{__name__}:_prompt_length", view=0)(["a"], [None])
