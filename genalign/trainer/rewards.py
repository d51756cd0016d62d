"""Evaluate the configured reward functions on a rollout: ``[N, K]`` rewards, NaN where a reward does not apply.

Metric names. Every reward is logged under a short name (``reward/<name>/mean`` per step, ``eval/reward/<name>`` per
evaluation, the dashboard's panel ``reward: <name>``), given by :func:`metric_names`:

1. the reward's ``name:`` when set, as written;
2. else its function's name: a registered reward's name (``exact_match``), the part after the last ``:`` of an import
   or file path (``path/to/file.py:brightness`` -> ``brightness``, ``pkg.mod:score`` -> ``score``), the part after the
   last ``.`` of ``pkg.mod.score``, a Python callable's ``__name__``;
3. two rewards never share a name: a derived name (rule 2) that equals another reward's name is qualified by its
   module, ``<file stem or last module part>.<function>`` (``a/clip.py:score`` -> ``clip.score``, beside
   ``b/aesthetic.py:score`` -> ``aesthetic.score``); if that still collides, by its position in ``rewards:``
   (``score_0``, ``score_1``). A ``name:`` is never changed: set one to choose the name yourself.

Conversational data (TRL's convention). When a row's prompt is a list of chat messages, a reward of one's own (a
Python callable, an import path or a reward file; not a registered reward such as ``exact_match``) receives that
message list as its prompt and ``[{"role": "assistant", "content": text}]`` as its completion, and the plain texts as
the keyword column ``completion_text``. Registered rewards read text either way.
"""

from __future__ import annotations

import re
from typing import Any

import torch
from torch import Tensor

from genalign.config.schema import RewardSpec
from genalign.errors import UserError
from genalign.policies.base import GUIDANCE_KEY
from genalign.rewards import REWARDS, reward_factory
from genalign.rewards.inputs import prompt_text
from genalign.rewards.runner import call_reward


def _function_name(fn: Any) -> str:
    """Rule 2 of the module docstring: the name of the function a reward's ``fn`` names."""
    if not isinstance(fn, str):
        return getattr(fn, "__name__", "reward")
    return re.split(r"[:.]", fn.rsplit(":", 1)[1] if ":" in fn else fn)[-1] or fn


def _module_name(fn: Any) -> str:
    """The file stem or last module part of a reward's ``fn`` (rule 3), '' for a registered name."""
    if not isinstance(fn, str):
        return str(getattr(fn, "__module__", "") or "").rsplit(".", 1)[-1]
    where = fn.rsplit(":", 1)[0] if ":" in fn else (fn.rsplit(".", 1)[0] if "." in fn else "")
    where = re.sub(r"\.py$", "", where)
    return re.split(r"[/\\.]", where)[-1] if where else ""


def metric_names(specs: list[RewardSpec]) -> list[str]:
    """The short, distinct name of each reward in logs and plots (rules in the module docstring)."""
    names = [spec.name or _function_name(spec.fn) for spec in specs]
    for rule in ("module", "position"):
        clashing = [i for i, name in enumerate(names) if not specs[i].name and names.count(name) > 1]
        for i in clashing:
            module = _module_name(specs[i].fn)
            if rule == "module" and module:
                names[i] = f"{module}.{_function_name(specs[i].fn)}"
            elif rule == "position":
                names[i] = f"{_function_name(specs[i].fn)}_{i}"
    for i, name in enumerate(names):
        if names.count(name) > 1:
            raise ValueError(f"rewards[{i}]: two rewards are logged as {name!r}; give them distinct 'name's.")
    return names


def _prompts_and_columns(
    rows: list[dict[str, Any]], extra_columns: dict[str, list[Any]]
) -> tuple[list[str], dict[str, list[Any]]]:
    """The prompts as text and the rows' other columns (guidance is training-only) plus ``extra_columns``."""
    keys = sorted({k for r in rows for k in r if k not in ("prompt", GUIDANCE_KEY)})
    return [prompt_text(r) for r in rows], {k: [r.get(k) for r in rows] for k in keys} | extra_columns


def is_conversational(rows: list[dict[str, Any]]) -> bool:
    """Some row's prompt is a list of chat messages (TRL's "conversational" format)."""
    return any(isinstance(row.get("prompt"), list) for row in rows)


def conversational_view(
    rows: list[dict[str, Any]], outputs: list[Any], columns: dict[str, list[Any]]
) -> tuple[list[Any], list[Any], dict[str, list[Any]]]:
    """TRL's convention for rewards of one's own on a conversational batch: a chat row's prompt is its message list
    and its completion ``[{"role": "assistant", "content": text}]``; the plain texts come as the column
    ``completion_text`` (rows with a text prompt keep text prompts and completions)."""
    prompts, completions = [], []
    for row, output in zip(rows, outputs, strict=True):
        chat = isinstance(row["prompt"], list) and isinstance(output, str)
        prompts.append(row["prompt"] if chat else prompt_text(row))
        completions.append([{"role": "assistant", "content": output}] if chat else output)
    return prompts, completions, columns | {"completion_text": list(outputs)}


class RewardLoadError(UserError, ValueError):
    """A configured reward whose function cannot be found, imported or built with its ``args``."""


class RewardSet:
    """The configured rewards, built once. ``__call__`` returns ``(rewards [N, K], error_counts [K])``.

    ``labels`` are the metric names (:func:`metric_names`), in the order of ``specs``.
    """

    def __init__(self, specs: list[RewardSpec]) -> None:
        self.specs = specs
        self.labels = metric_names(specs)
        self.weights = torch.tensor([s.weight for s in specs], dtype=torch.float32)
        #: a reward of the user's own (a callable, an import path or a file) gets TRL's conversational convention
        self.users_own = [not (isinstance(s.fn, str) and s.fn in REWARDS) for s in specs]
        self.fns = []
        for i, (spec, name) in enumerate(zip(specs, self.labels)):
            try:
                self.fns.append(reward_factory(spec.fn)(**spec.args))
            except (KeyError, ValueError, TypeError, ImportError, OSError, AttributeError) as err:
                what = "bad args " + repr(spec.args) if isinstance(err, TypeError) else type(err).__name__
                raise RewardLoadError(
                    f"reward rewards[{i}] {name!r} (fn {spec.fn!r}) cannot be loaded ({what}): {err}"
                ) from err

    def _arguments(self, rows: list[dict[str, Any]], outputs: list[Any], extra_columns: dict[str, list[Any]]):
        """``(prompts, completions, columns)`` for genalign's registered rewards (text prompts, the outputs as they
        are) and for the user's own (TRL's conversational convention on chat rows: :func:`conversational_view`)."""
        prompts, columns = _prompts_and_columns(rows, extra_columns)
        ours = (prompts, outputs, columns)
        if not any(self.users_own) or not is_conversational(rows):
            return ours, ours
        return ours, conversational_view(rows, outputs, columns)

    def name_of(self, reference: str | None) -> str:
        """The metric name of the reward that ``reference`` names: its metric name or its config label (``name:``,
        else ``fn``, as ``eval.accuracy_reward`` may give it); None: the first reward."""
        if reference is None:
            return self.labels[0]
        if reference in self.labels:
            return reference
        for spec, name in zip(self.specs, self.labels):
            if spec.label == reference:
                return name
        raise ValueError(f"{reference!r} is not one of the rewards; use one of {self.labels}.")

    def __call__(
        self, rows: list[dict[str, Any]], outputs: list[Any], **extra_columns: list[Any]
    ) -> tuple[Tensor, Tensor]:
        """``extra_columns`` come from the rollout (e.g. ``completion_length``, the number of actions per sample)."""
        for_ours, for_users = self._arguments(rows, outputs, extra_columns)
        values, errors = [], []
        for spec, fn, own in zip(self.specs, self.fns, self.users_own):
            prompts, completions, columns = for_users if own else for_ours
            scores, num_errors = call_reward(spec.label, fn, prompts, completions, columns, on_error=spec.on_error)
            values.append(torch.tensor(scores, dtype=torch.float32))
            errors.append(num_errors)
        return torch.stack(values, dim=1), torch.tensor(errors, dtype=torch.float32)  # [N, K], [K]

    def score_each(
        self, rows: list[dict[str, Any]], outputs: list[Any], **extra_columns: list[Any]
    ) -> tuple[Tensor, dict[str, str]]:
        """``[N, K]`` rewards where a reward that raises (e.g. on prompts without the ``answer`` column it reads) is
        NaN for the whole batch instead of stopping the others; returns the failures by metric name too. For
        ``genalign sample --score``, which scores free-text prompts; ``extra_columns`` describe the outputs (videos'
        ``fps``)."""
        for_ours, for_users = self._arguments(rows, outputs, extra_columns)
        values, failures = [], {}
        for name, fn, own in zip(self.labels, self.fns, self.users_own):
            prompts, completions, columns = for_users if own else for_ours
            try:
                scores, _ = call_reward(name, fn, prompts, completions, columns, on_error="raise")
            except Exception as err:  # any failure of user code: reported by name, the other rewards still score
                scores, failures[name] = [float("nan")] * len(outputs), f"{type(err).__name__}: {err}"
            values.append(torch.tensor(scores, dtype=torch.float32))
        return torch.stack(values, dim=1), failures  # [N, K]

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
        for name, fn in zip(self.labels, self.fns):
            pop = getattr(fn, "pop_metrics", None)
            if callable(pop):
                metrics |= {f"reward/{name}/{key}": value for key, value in pop().items()}
        return metrics
