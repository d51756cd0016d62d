"""Teachers that run in this process: another model of the family (``source: model``) or the policy's own weights
(``source: self``), scored through the family's chunked head pass (:meth:`TeacherHost.score_with`), so no
``[n, T, V]`` logits exist and the teacher's per-action log-probs come from the same code path as the policy's and its
reference's. With a ``context``, the prompts are re-rendered with the privileged context first
(:meth:`TeacherHost.with_prompts`, :mod:`genalign.teachers.context`); the actions are the student's. The teacher
writes (:meth:`LocalTeacher.write`) through the family's rollout engine run on its module
(:meth:`TeacherHost.write_with`), after the prompts with the same context.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor, nn

from genalign.algorithms.scores import ScoreOutput, ScoreRequest
from genalign.policies.base import Rollout, TeacherHost
from genalign.teachers.base import PassCount, Teacher, same_count
from genalign.teachers.config import TeacherConfig
from genalign.teachers.context import Template, context_rows, other_rows
from genalign.teachers.distribution import VOCABULARY_SIGNALS, compare_distributions

#: ``run(fn)``: ``fn(module)`` under the teacher's weights, without gradient
WeightsRunner = Callable[[Callable[[nn.Module], Any]], Any]


def _template(text: str | None, field: str, *, others: bool) -> Template | None:
    return None if text is None else Template.parse(text, field, others=others)


class LocalTeacher(Teacher):
    """A teacher model, or the policy's base or current weights (module docstring).

    Args:
        run: calls a scoring function with the teacher's module (the peer model, or the host's reference or
            current weights).
        shares_policy_modules: the module is the policy's own (a self-teacher).
        anchor: the same for ``distribution.anchor`` (:mod:`genalign.teachers.distribution`), or None.
    """

    def __init__(
        self, config: TeacherConfig, host: TeacherHost, batch_size: int, run: WeightsRunner, *,
        shares_policy_modules: bool, anchor: WeightsRunner | None = None,
    ) -> None:  # fmt: skip
        super().__init__(config, host, batch_size)
        self.run = run
        self.anchor = anchor
        self.shares_policy_modules = shares_policy_modules
        self.context = _template(config.context, "algorithm.teacher.context", others=False)
        self.contrast = _template(config.contrast_context, "algorithm.teacher.contrast_context", others=True)
        self._without_contrast = 0

    def judge(
        self, rollout: Rollout, wanted: frozenset[str], *, passes_everywhere: PassCount = same_count
    ) -> dict[str, Tensor]:
        """``teacher_scored`` (every sample), ``teacher_action_logp`` and, when wanted, ``teacher_entropy`` and
        ``teacher_contrast_logp`` (a second pass under the contrast context)."""
        mask = rollout.action_mask
        request = ScoreRequest.of("entropy") if "teacher_entropy" in wanted else ScoreRequest()
        view = rollout
        if self.context is not None:
            view = self.host.with_prompts(
                rollout, context_rows(rollout.rows, self.context, "algorithm.teacher.context")
            )
        values = {"teacher_scored": torch.ones(len(rollout), dtype=torch.bool, device=mask.device)}
        if wanted & VOCABULARY_SIGNALS or self.config.distribution.extrapolates:
            values |= self._distribution(view, rollout, wanted)
        else:
            logp, features = self._scores(view, request, passes_everywhere)
            values["teacher_action_logp"] = logp * mask  # [n, T]
            if "teacher_entropy" in wanted:
                values["teacher_entropy"] = features["entropy"] * mask  # [n, T]
            if "teacher_anchor_logp" in wanted:
                assert self.anchor is not None, "config load refuses teacher_anchor_logp without distribution.anchor"
                anchor, _ = self._scores(view, ScoreRequest(), passes_everywhere, run=self.anchor)
                values["teacher_anchor_logp"] = anchor * mask  # [n, T]
        if "teacher_contrast_logp" in wanted:
            assert self.contrast is not None, "config load refuses teacher_contrast_logp without contrast_context"
            others, alone = other_rows(rollout.rows, self.contrast.other_columns)
            self._without_contrast += alone
            rows = context_rows(rollout.rows, self.contrast, "algorithm.teacher.contrast_context", others)
            contrast, _ = self._scores(self.host.with_prompts(rollout, rows), ScoreRequest(), passes_everywhere)
            values["teacher_contrast_logp"] = contrast * mask  # [n, T]
        return values

    def write(
        self, rows: list[dict[str, Any]], starts: list[list[int]], caps: list[int | None]
    ) -> list[tuple[list[int], Tensor]]:
        """:meth:`Teacher.write` under the teacher's weights, in engine calls of ``batch_size`` samples, after the
        prompts with the privileged ``context`` when there is one (the teacher writes seeing what the student does
        not: the self-context teacher of [72])."""
        if self.context is not None:
            rows = context_rows(rows, self.context, "algorithm.teacher.context")
        written: list[tuple[list[int], Tensor]] = []
        for block in self.batches(len(rows)):
            part = ([rows[i] for i in block], [starts[i] for i in block], [caps[i] for i in block])
            written += self.run(lambda module, part=part: self.host.write_with(module, *part))
        return written

    def _distribution(self, view: Rollout, rollout: Rollout, wanted: frozenset[str]) -> dict[str, Tensor]:
        """The full-distribution pass (:mod:`genalign.teachers.distribution`), in passes of ``batch_size``: the
        teacher on ``view``, the student (the current weights) on ``rollout``, the anchor on ``view``; ``[n, T]``
        each: the teacher's action log-probs and entropy (of the extrapolated distribution when configured), the
        divergences, the anchor's log-probs and the extrapolation weight when wanted."""
        options, hidden = self.config.distribution, ScoreRequest.of("hidden")
        names = {"teacher_action_logp": "target_logp", "teacher_entropy": "entropy",
                 "teacher_vocab_reverse_kl": "reverse_kl", "teacher_vocab_forward_kl": "forward_kl",
                 "teacher_extrapolation": "weight"}  # fmt: skip
        runs = {"teacher": self.run, "student": self.host.under_current_weights}
        if self.anchor is not None:
            runs["anchor"] = self.anchor
        parts: list[dict[str, Tensor]] = []
        for block in self.batches(len(view)):
            views = {"teacher": view.select(block), "student": rollout.select(block), "anchor": view.select(block)}
            scored = {
                name: run(lambda module, part=views[name]: (self.host.score_with(module, part, hidden), module))
                for name, run in runs.items()
            }
            heads = {name: functools.partial(self.host.head_logits, module) for name, (_, module) in scored.items()}
            compared = compare_distributions(
                {name: out["hidden"] for name, (out, _) in scored.items()},
                {name: out.logp for name, (out, _) in scored.items() if name != "student"},
                views["student"].action_mask, heads, chunk_size=options.chunk_size,
                options=options if options.extrapolates else None,
            )  # fmt: skip
            part = {signal: compared[key] for signal, key in names.items()}
            if self.anchor is not None:
                part["teacher_anchor_logp"] = scored["anchor"][0].logp.float() * views["student"].action_mask
            parts.append(part)
        device = view.action_mask.device
        keep = (wanted | {"teacher_action_logp"}) & set(parts[0]) if parts else set()
        return {name: torch.cat([part[name].to(device) for part in parts]) for name in keep}

    def _scores(
        self, view: Rollout, request: ScoreRequest, passes_everywhere: PassCount, *, run: WeightsRunner | None = None
    ) -> tuple[Tensor, dict]:
        """``[n, T]`` float32 log-probs and the requested features of ``view``, in passes of ``batch_size``, under the
        teacher's weights (or ``run``'s)."""
        device = view.action_mask.device
        if not len(view):  # (sharded training refuses a process without samples before this)
            zeros = torch.zeros(view.action_mask.shape, device=device)
            return zeros, dict.fromkeys(request.features, zeros)
        blocks = self.batches(len(view))
        parts: list[ScoreOutput] = [self._pass(view.select(block), request, run) for block in blocks]
        for _ in range(passes_everywhere(len(blocks)) - len(blocks)):  # sharded modules: as many passes as the busiest
            self._pass(view.select([0]), request, run)
        logp = torch.cat([part.logp.float().to(device) for part in parts])  # [n, T]
        return logp, {name: torch.cat([part[name].float().to(device) for part in parts]) for name in request.features}

    def _pass(self, part: Rollout, request: ScoreRequest, run: WeightsRunner | None = None) -> ScoreOutput:
        return (run or self.run)(lambda module: self.host.score_with(module, part, request))

    def take_metrics(self) -> dict[str, float]:
        """``teacher/contrast_unavailable``: samples whose batch held no other value of the contrast columns."""
        if self.contrast is None:
            return {}
        counted, self._without_contrast = self._without_contrast, 0
        return {"teacher/contrast_unavailable": float(counted)}


__all__ = ["LocalTeacher", "WeightsRunner"]
