"""Training rollouts of given completions (``Policy.force``) for the causal-LM family: replayed samples and reference
solutions that join a step's groups without being sampled, and given starts the policy continues.

Each completion is a ``[T_i]`` long tensor of token ids (ending with an end token when it ended) or a text, which is
tokenized on its own (no special tokens) and closed with the tokenizer's end token. A completion longer than
``policy.max_new_tokens`` is cut to it (the memory plan sizes rollouts by that limit), with its behaviour log-probs.
The rows are rendered exactly like :meth:`CausalLMPolicy.rollout` renders them (chat template, guidance ``hint`` and
``prefix``; a ``self_hint`` is not sampled again and a ``temperature`` does not apply to given tokens), so the
``per_sample`` layout is the sampled one: a forced rollout of a sampled rollout's own completions scores identically.

A *forced continuation* (``continues[i]``): the given ids are the start of the completion, and the rollout engine
samples the rest after ``[prompt | start]`` with the training sampling settings (``policy.temperature``, top-k/top-p,
stop strings), within the ``max_new_tokens`` the start left; the start and the sampled rest are all actions. A start
that already ends (its end token or a stop string) or fills the limit is not continued.

``old_logp`` is the given behaviour log-probs where there are some (NaN entries excepted), the engine's for continued
tokens, else the current policy's log-probs, computed without gradient, in eval mode, through the scoring pass of
``score`` (at ``policy.temperature``).
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any, Protocol

import torch
from torch import Tensor

from genalign.algorithms.scores import ScoreOutput, ScoreRequest
from genalign.policies.base import Rollout, RolloutRequest
from genalign.policies.lm.core import completion_structure, empty_rollout, eval_mode
from genalign.policies.lm.guidance import completion_texts, conditioning_only
from genalign.policies.lm.prompts import EncodedPrompts

#: ``per_sample`` keys of a causal-LM rollout that are left-padded (``Rollout.left_padded``).
LEFT_PADDED = frozenset({"prompt_ids", "prompt_mask"})


class ForcingPolicy(Protocol):
    """What :func:`forced_rollout` uses of :class:`genalign.policies.lm.causal.CausalLMPolicy`."""

    config: Any
    model: Any
    tokenizer: Any
    device: torch.device
    eos_token_ids: tuple[int, ...]
    pad_token_id: int
    stop_matcher: Any
    segments: Any
    engine: Any
    generator: torch.Generator

    def encode(self, rows: list[dict[str, Any]]) -> EncodedPrompts: ...

    def score_actions(self, module: Any, rollout: Rollout, request: ScoreRequest) -> ScoreOutput: ...

    def sampling_params(self, mode: str) -> Any: ...


def with_action_ids(request: RolloutRequest) -> RolloutRequest:
    """``request`` plus ``action_ids``: a family with ``forced_completions`` stores every training sample's tokens."""
    return replace(request, structure=request.structure | {"action_ids"})


def completion_tokens(policy: ForcingPolicy, completion: Tensor | str, index: int) -> list[int]:
    """Token ids of completion ``index``: the tensor's ids, or the text's ids followed by the end token."""
    if isinstance(completion, str):
        eos = policy.tokenizer.eos_token_id
        eos = eos if eos is not None else policy.eos_token_ids[0]
        return [*policy.tokenizer(completion, add_special_tokens=False)["input_ids"], int(eos)]
    if not isinstance(completion, Tensor) or completion.dim() != 1 or completion.dtype != torch.long:
        raise ValueError(
            f"completions[{index}] must be a 1-d long tensor of token ids or a text, got "
            f"{type(completion).__name__} {tuple(getattr(completion, 'shape', ()))}."
        )
    return completion.tolist()


def ended(policy: ForcingPolicy, tokens: list[int]) -> bool:
    """The completion ends with an end token or a stop string (it was not cut by the length limit)."""
    if tokens and tokens[-1] in policy.eos_token_ids:
        return True
    return bool(policy.stop_matcher) and policy.stop_matcher.tail_contains_stop(tokens)


def _behaviour(given: Tensor | None, length: int, index: int) -> Tensor | None:
    """Completion ``index``'s behaviour log-probs cut to ``length`` (checked against its token count)."""
    if given is None:
        return None
    if given.dim() != 1 or given.shape[0] < length:
        raise ValueError(
            f"behaviour_logp[{index}] has shape {tuple(given.shape)}; it must be [T_i] with one log-prob per token "
            f"of completions[{index}] ({length} kept)."
        )
    return given[:length].float().cpu()


def forced_rollout(
    policy: ForcingPolicy,
    rows: list[dict[str, Any]],
    completions: list[Tensor | str],
    behaviour_logp: list[Tensor | None],
    request: RolloutRequest,
    continues: list[bool] | None = None,
) -> Rollout:
    """The rollout of ``completions[i]`` answering ``rows[i]`` (module docstring); ``group_ids`` index ``rows``.
    Rows whose prompt is too long are skipped like in a sampled rollout (``policy.on_long_prompt``), with their
    completions. ``continues[i]``: the completion is a start the rollout engine continues (None: none is)."""
    continues = list(continues) if continues is not None else [False] * len(rows)
    if not len(rows) == len(completions) == len(behaviour_logp) == len(continues):
        raise ValueError(
            f"force: {len(rows)} rows, {len(completions)} completions, {len(behaviour_logp)} behaviour_logp and "
            f"{len(continues)} continues entries; give one completion, one behaviour_logp (or None) and one "
            "continues flag per row."
        )
    prompts = policy.encode([conditioning_only(row) for row in rows])
    counts: dict[str, int] = {
        "prompts_skipped_too_long": len(prompts.skipped),
        "prompts_truncated": len(prompts.truncated),
    }
    if not prompts.kept:
        return empty_rollout(counts)
    limit = policy.config.max_new_tokens
    tokens = [completion_tokens(policy, completions[i], i)[:limit] for i in prompts.kept]
    if any(not seq for seq in tokens):
        raise ValueError("force: a completion has no token; give at least the end token.")
    given = [_behaviour(behaviour_logp[i], len(seq), i) for i, seq in zip(prompts.kept, tokens, strict=True)]
    continuing = [bool(continues[i]) for i in prompts.kept]
    if any(continuing):
        tokens, given = _continued(policy, prompts, tokens, given, continuing, counts)
    width = max(len(seq) for seq in tokens)
    ids = torch.full((len(tokens), width), policy.pad_token_id, dtype=torch.long)  # [n, C]
    mask = torch.zeros(len(tokens), width)  # [n, C]
    for row, seq in enumerate(tokens):
        ids[row, : len(seq)] = torch.tensor(seq, dtype=torch.long)
        mask[row, : len(seq)] = 1.0
    truncated = torch.tensor([not ended(policy, seq) and len(seq) >= limit for seq in tokens])  # [n]
    ids, mask, truncated = ids.to(policy.device), mask.to(policy.device), truncated.to(policy.device)
    group_ids = torch.arange(len(tokens))
    lengths = [len(seq) for seq in tokens]
    counts["completion_tokens"] = int(sum(lengths))
    rollout = Rollout(
        rows=[rows[i] for i in prompts.kept],
        outputs=completion_texts(policy.tokenizer, policy.stop_matcher, prompts.prefixes, ids, lengths),
        group_ids=group_ids,
        old_logp=torch.zeros(len(tokens), width, device=policy.device),
        action_mask=mask,
        structure=completion_structure(
            with_action_ids(request), policy.segments, truncated, ids, mask, group_ids=group_ids
        ),
        per_sample={
            "prompt_ids": prompts.ids.to(policy.device),
            "prompt_mask": prompts.mask.to(policy.device),
            "completion_ids": ids,
            "completion_mask": mask,
        },
        counts=counts,
        left_padded=LEFT_PADDED,
    )
    rollout.old_logp = _old_logprobs(policy, rollout, given)
    return rollout


def _continued(
    policy: ForcingPolicy,
    prompts: EncodedPrompts,
    tokens: list[list[int]],
    given: list[Tensor | None],
    continuing: list[bool],
    counts: dict[str, int],
) -> tuple[list[list[int]], list[Tensor | None]]:
    """``tokens`` and ``given`` with the flagged starts continued: one engine call samples after ``[prompt | start]``
    (:func:`sample_after`) for every start with room left, each continuation cut to its own room (``max_new_tokens −
    len(start)``); the continued sample's behaviour log-probs are the given ones of its start (NaN where none was
    given: scored by the current policy) followed by the engine's. Counts ``continued`` and ``continued_tokens``."""
    limit = policy.config.max_new_tokens
    chosen = [k for k, seq in enumerate(tokens) if continuing[k] and len(seq) < limit and not ended(policy, seq)]
    counts["continued"], counts["continued_tokens"] = len(chosen), 0
    if not chosen:
        return tokens, given
    contexts = [prompts.ids[k][prompts.mask[k] > 0].tolist() + tokens[k] for k in chosen]
    written = sample_after(policy, policy.engine, policy.model, contexts, [limit - len(tokens[k]) for k in chosen])
    tokens, given = list(tokens), list(given)
    for k, (ids, logp) in zip(chosen, written, strict=True):
        start_logp = given[k] if given[k] is not None else torch.full((len(tokens[k]),), math.nan)
        tokens[k] = tokens[k] + ids
        given[k] = torch.cat([start_logp, logp])
        counts["continued_tokens"] += len(ids)
    return tokens, given


def sample_after(
    policy: ForcingPolicy, engine: Any, module: Any, contexts: list[list[int]], room: list[int]
) -> list[tuple[list[int], Tensor]]:
    """One call of ``engine`` (a rollout engine of ``module``: the policy's, or a teacher's) after each context (prompt
    ids then the completion's start, unpadded; left-padded here) with the policy's training sampling settings: the
    sampled ids (at most ``room[i]`` >= 1, ending with the end token when it ended) and their behaviour log-probs
    ``[k_i]`` float32 on the CPU, in eval mode and without gradient."""
    width = max(len(context) for context in contexts)
    ids = torch.full((len(contexts), width), policy.pad_token_id, dtype=torch.long)  # [c, P'] left-padded
    mask = torch.zeros(len(contexts), width, dtype=torch.long)  # [c, P']
    for row, context in enumerate(contexts):
        ids[row, width - len(context) :] = torch.tensor(context, dtype=torch.long)
        mask[row, width - len(context) :] = 1
    params = replace(policy.sampling_params("train"), max_new_tokens=max(room))
    with torch.no_grad(), eval_mode(module):
        generation = engine.generate(ids.to(policy.device), mask.to(policy.device), params, policy.generator)
    written = []
    for row, limit in enumerate(room):
        length = min(int(generation.completion_mask[row].sum()), limit)
        written.append((generation.completion_ids[row, :length].tolist(), generation.logp[row, :length].float().cpu()))
    return written


def _old_logprobs(policy: ForcingPolicy, rollout: Rollout, given: list[Tensor | None]) -> Tensor:
    """``[n, C]``: the given behaviour log-probs, the current policy's (no grad, eval mode) where none was given
    (None, or a NaN entry)."""
    old = torch.zeros_like(rollout.action_mask)  # [n, C]
    if any(g is None or bool(g.isnan().any()) for g in given):
        with torch.no_grad(), eval_mode(policy.model):
            old = policy.score_actions(policy.model, rollout, ScoreRequest()).logp.detach().float()  # [n, C]
    for row, values in enumerate(given):
        if values is not None:
            length = values.shape[0]
            values = values.to(old.device)
            known = torch.where(values.isnan(), old[row, :length], values)  # [T_i]
            old[row] = 0.0
            old[row, :length] = known
    return old * rollout.action_mask


__all__ = ["LEFT_PADDED", "completion_tokens", "ended", "forced_rollout", "sample_after", "with_action_ids"]
