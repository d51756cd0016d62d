"""MV-GRPO [63] caption views: any reward re-scored with the prompt replaced by another caption of it, so that the
same samples get one reward column per view (combine them with the ``multi_view`` reward combiner).

A view is either the ``view``-th entry of the dataset column ``views`` (a list of captions per row, written by a
caption model offline; the paper's Condition Enhancer is an LLM, none runs here) or a ``template`` applied to the
prompt (``"a photo of {prompt}"``). A row without that view gets ``None`` (not applicable).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from genalign.rewards.base import register_reward, reward_factory


@register_reward("caption_view", source="[63] MV-GRPO", inner_rewards=({"name": "reward", "args": "reward_args"},))
class CaptionView:
    """Score ``completions`` with ``reward`` under one caption view of each prompt.

    Args:
        reward: the inner reward (registered name or import path).
        reward_args: its arguments.
        view: index into the row's ``views`` column; exactly one of ``view`` and ``template``.
        template: a format string with ``{prompt}``.
        drop_columns: dataset columns hidden from the inner reward (e.g. ``[target]``, so that a reward that would
            read the target from a column parses it from the view instead).
    """

    def __init__(
        self,
        *,
        reward: str,
        reward_args: Mapping[str, Any] | None = None,
        view: int | None = None,
        template: str | None = None,
        drop_columns: Sequence[str] = (),
    ) -> None:
        if (view is None) == (template is None):
            raise ValueError(
                f"caption_view needs exactly one of view (an index into the 'views' column) and template (e.g. "
                f"'a photo of {{prompt}}'); got view={view!r}, template={template!r}."
            )
        if template is not None and "{prompt}" not in template:
            raise ValueError(f"caption_view: template={template!r} must contain '{{prompt}}'.")
        if view is not None and view < 0:
            raise ValueError(f"caption_view: view={view} must be >= 0 (an index into the row's 'views' list).")
        self.inner = reward_factory(reward)(**dict(reward_args or {}))
        self.view, self.template, self.drop = view, template, set(drop_columns)

    def _caption(self, prompt: str, views: Any) -> str | None:
        if self.template is not None:
            return self.template.replace("{prompt}", prompt)
        if not isinstance(views, Sequence) or isinstance(views, str) or self.view >= len(views):
            return None
        return str(views[self.view])

    def __call__(self, prompts: Sequence[str], completions: Sequence[Any], **columns: Sequence[Any]) -> list:
        if self.view is not None and "views" not in columns:
            raise ValueError(
                "caption_view with view=... reads the dataset column 'views' (a list of captions per row), which this "
                "batch lacks; add it to the data or use template=..."
            )
        views = columns.get("views", [None] * len(prompts))
        captions = [self._caption(p, v) for p, v in zip(prompts, views, strict=True)]
        keep = [i for i, c in enumerate(captions) if c is not None]
        scores: list[float | None] = [None] * len(prompts)
        if not keep:
            return scores
        inner_columns = {k: [v[i] for i in keep] for k, v in columns.items() if k not in self.drop}
        values = self.inner([captions[i] for i in keep], [completions[i] for i in keep], **inner_columns)
        for i, value in zip(keep, values, strict=True):
            scores[i] = value
        return scores
