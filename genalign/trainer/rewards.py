"""Evaluate the configured reward functions on a rollout: ``[N, K]`` rewards, NaN where a reward does not apply."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from genalign.config.schema import RewardSpec
from genalign.policies.base import GUIDANCE_KEY
from genalign.rewards import reward_factory
from genalign.rewards.runner import call_reward


def prompt_text(row: dict[str, Any]) -> str:
    """The prompt as text: the string itself, or the text of the last user message of a chat prompt."""
    prompt = row["prompt"]
    if isinstance(prompt, str):
        return prompt
    for message in reversed(prompt):
        if message.get("role") == "user":
            content = message.get("content", "")
            if isinstance(content, str):
                return content
            return " ".join(part.get("text", "") for part in content if isinstance(part, dict))
    return ""


class RewardSet:
    """The configured rewards, built once. ``__call__`` returns ``(rewards [N, K], error_counts [K])``."""

    def __init__(self, specs: list[RewardSpec]) -> None:
        self.specs = specs
        self.labels = [s.label for s in specs]
        self.weights = torch.tensor([s.weight for s in specs], dtype=torch.float32)
        self.fns = []
        for i, spec in enumerate(specs):
            try:
                self.fns.append(reward_factory(spec.fn)(**spec.args))
            except TypeError as err:
                raise ValueError(f"rewards[{i}] ({spec.fn}): bad args {spec.args}: {err}") from None

    def __call__(
        self, rows: list[dict[str, Any]], outputs: list[Any], **extra_columns: list[Any]
    ) -> tuple[Tensor, Tensor]:
        """``extra_columns`` come from the rollout (e.g. ``completion_length``, the number of actions per sample)."""
        prompts = [prompt_text(r) for r in rows]
        keys = sorted({k for r in rows for k in r if k not in ("prompt", GUIDANCE_KEY)})  # guidance: training-only
        columns = {k: [r.get(k) for r in rows] for k in keys} | extra_columns
        values, errors = [], []
        for spec, fn in zip(self.specs, self.fns):
            scores, num_errors = call_reward(spec.label, fn, prompts, outputs, columns, on_error=spec.on_error)
            values.append(torch.tensor(scores, dtype=torch.float32))
            errors.append(num_errors)
        return torch.stack(values, dim=1), torch.tensor(errors, dtype=torch.float32)  # [N, K], [K]

    def weighted_sum(self, rows: list[dict[str, Any]], outputs: list[Any]) -> Tensor:
        """``[n]`` weighted sum of the rewards (a missing reward counts 0), for step-level reward probes (DenseGRPO)."""
        table, _ = self(rows, outputs)  # [n, K]
        return self.table_sum(table).nan_to_num(0.0)  # [n]

    def table_sum(self, table: Tensor) -> Tensor:
        """``[n]`` weighted sum of a ``[n, K]`` reward table (NaN = not applied; a missing reward counts 0), NaN
        where no reward applied to the sample."""
        total = (table.nan_to_num(0.0) * self.weights).sum(1)  # [n]
        return torch.where(table.isnan().all(1), float("nan"), total)

    def take_metrics(self) -> dict[str, float]:
        """Counters of the reward objects that keep some (``pop_metrics()``, e.g. unparsable answers), accumulated
        since the previous call, as ``reward/<label>/<key>``."""
        metrics = {}
        for spec, fn in zip(self.specs, self.fns):
            pop = getattr(fn, "pop_metrics", None)
            if callable(pop):
                metrics |= {f"reward/{spec.label}/{key}": value for key, value in pop().items()}
        return metrics
