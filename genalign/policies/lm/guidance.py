"""Guidance a sample source attaches to a training prompt (``row[GUIDANCE_KEY]``), as token LMs honour it.

A row's guidance is a dict with the keys of :data:`GUIDANCE_KEYS` (and the options of ``self_hint``):

* ``hint``: text appended to the user prompt (to the string, or to the last user message of a chat prompt) before
  the chat template renders it, e.g. ``"\\nHint: factor the quadratic"``;
* ``prefix``: text the assistant's completion is forced to start with: tokenized on its own and appended after the
  rendered prompt (after the chat template's generation prompt). It is conditioning, not actions: its tokens are part
  of ``prompt_ids`` and never get a log-prob, a loss term or a gradient. The reward functions see the whole solution
  (``prefix`` + the sampled continuation);
* ``temperature``: this row's sampling temperature (rows are sampled in one engine call per temperature); the behaviour
  log-probs are taken at it, the trainer re-scores at ``policy.temperature``;
* ``self_hint``: an instruction appended to the prompt, under which the policy first samples a short hint
  (``self_hint_tokens`` tokens at most, default 64; one hint per row, shared by its group), then adds
  ``self_hint_template.format(hint=...)`` (default ``"\\nHint: {hint}"``) like ``hint`` ([69] SAGE).

Evaluation rows come straight from the data and never carry guidance; reward functions never see the key
(:class:`genalign.trainer.rewards.RewardSet` drops it).
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, replace
from typing import Any, Protocol

import torch
from torch import Tensor

from genalign.algorithms.structure import PrefixTree
from genalign.policies.base import GUIDANCE_KEY
from genalign.policies.lm.engines.base import Generation, SamplingParams
from genalign.policies.lm.options import GUIDANCE_KEYS

#: Options of ``self_hint`` that may accompany it in the guidance dict.
SELF_HINT_OPTIONS = frozenset({"self_hint_tokens", "self_hint_template"})


@dataclass(frozen=True)
class RowGuidance:
    """One row's guidance, validated (module docstring); the defaults mean "no guidance"."""

    hint: str = ""
    prefix: str = ""
    temperature: float | None = None
    self_hint: str | None = None
    self_hint_tokens: int = 64
    self_hint_template: str = "\nHint: {hint}"


def read_guidance(row: dict[str, Any], index: int) -> RowGuidance:
    """The validated guidance of ``row`` (row ``index`` of the call, for messages); no key = no guidance."""
    raw = row.get(GUIDANCE_KEY)
    if raw is None:
        return RowGuidance()
    if not isinstance(raw, dict):
        raise ValueError(
            f"row {index}: {GUIDANCE_KEY!r} is a {type(raw).__name__}; it must be a dict of guidance keys."
        )
    unknown = sorted(set(raw) - GUIDANCE_KEYS - SELF_HINT_OPTIONS)
    if unknown:
        raise ValueError(
            f"row {index}: unknown guidance key(s) {unknown}; a causal LM honours {sorted(GUIDANCE_KEYS)} "
            f"(self_hint options {sorted(SELF_HINT_OPTIONS)})."
        )
    guidance = RowGuidance(**raw)
    for name in ("hint", "prefix", "self_hint_template"):
        if not isinstance(getattr(guidance, name), str):
            raise ValueError(f"row {index}: guidance {name}={getattr(guidance, name)!r} must be a string.")
    if guidance.temperature is not None and not (
        isinstance(guidance.temperature, int | float) and guidance.temperature > 0
    ):
        raise ValueError(f"row {index}: guidance temperature={guidance.temperature!r} must be a number > 0.")
    if guidance.self_hint is not None and not isinstance(guidance.self_hint, str):
        raise ValueError(f"row {index}: guidance self_hint={guidance.self_hint!r} must be an instruction string.")
    if not (isinstance(guidance.self_hint_tokens, int) and guidance.self_hint_tokens >= 1):
        raise ValueError(f"row {index}: guidance self_hint_tokens={guidance.self_hint_tokens!r} must be an int >= 1.")
    if "{hint}" not in guidance.self_hint_template:
        raise ValueError(
            f"row {index}: guidance self_hint_template={guidance.self_hint_template!r} must contain '{{hint}}'."
        )
    return guidance


def append_to_prompt(prompt: Any, text: str) -> Any:
    """``prompt`` (a string, or chat messages) with ``text`` appended: to the string, or to the content of the last
    user message (the last message when there is no user message). Mirrors
    :func:`genalign.policies.lm.probes.hinted_row`, which does the same to a whole row."""
    if not text:
        return prompt
    if isinstance(prompt, str):
        return prompt + text
    messages = [dict(m) for m in prompt]
    last_user = max((i for i, m in enumerate(messages) if m.get("role") == "user"), default=len(messages) - 1)
    messages[last_user]["content"] = f"{messages[last_user]['content']}{text}"
    return messages


def with_resolved_hint(row: dict[str, Any], hint_text: str) -> dict[str, Any]:
    """``row`` whose ``self_hint`` became the sampled ``hint_text`` (formatted with the row's template and added
    after its ``hint``), so that rendering it again reproduces the prompt the completion was sampled under."""
    guidance = dict(row[GUIDANCE_KEY])
    template = guidance.pop("self_hint_template", RowGuidance.self_hint_template)
    guidance.pop("self_hint", None)
    guidance.pop("self_hint_tokens", None)
    guidance["hint"] = guidance.get("hint", "") + template.format(hint=hint_text)
    return {**row, GUIDANCE_KEY: guidance}


def conditioning_only(row: dict[str, Any]) -> dict[str, Any]:
    """``row`` with only the guidance that renders deterministically (``hint``, ``prefix``): what a forced completion
    is conditioned on (a ``self_hint`` is not sampled again, a temperature does not apply to given tokens)."""
    if GUIDANCE_KEY not in row:
        return row
    kept = {k: v for k, v in row[GUIDANCE_KEY].items() if k in ("hint", "prefix")}
    return {**row, GUIDANCE_KEY: kept}


class HintSampler(Protocol):
    """What :func:`sample_self_hints` uses of a causal-LM policy."""

    tokenizer: Any
    engine: Any
    generator: torch.Generator
    device: torch.device
    pad_token_id: int
    stop_matcher: Any

    def encode(self, rows: list[dict[str, Any]], *, limit: bool = True) -> Any: ...


def sample_self_hints(
    policy: HintSampler, rows: list[dict[str, Any]], params: SamplingParams, counts: dict[str, int]
) -> list[dict[str, Any]]:
    """``rows`` whose ``self_hint`` instruction is replaced by a hint the policy samples under it ([69] SAGE): the
    instruction is appended to the prompt (after the row's ``hint``; without its ``prefix``), one hint per row is
    sampled with ``params`` at the row's temperature and ``self_hint_tokens`` at most, decoded, stripped and added
    with :func:`with_resolved_hint`. The instruction prompt is not held to ``policy.max_prompt_tokens`` (the
    reference solution may be long); the final prompt with the hint is. Counts ``self_hints`` and
    ``self_hint_tokens`` in ``counts``. Call it with the model in eval mode."""
    asking = [i for i, row in enumerate(rows) if read_guidance(row, i).self_hint is not None]
    guidance = {i: read_guidance(rows[i], i) for i in asking}
    instructed = [{**rows[i], GUIDANCE_KEY: {"hint": guidance[i].hint + guidance[i].self_hint}} for i in asking]
    prompts = policy.encode(instructed, limit=False)  # the final prompt (with the hint) obeys the limit
    keys = [(guidance[asking[k]].temperature or params.temperature, guidance[asking[k]].self_hint_tokens)
            for k in prompts.kept]  # fmt: skip
    parts = []
    for (temperature, tokens), members in split_by(keys):
        chosen = torch.tensor(members)
        generation = policy.engine.generate(
            prompts.ids[chosen].to(policy.device),
            prompts.mask[chosen].to(policy.device),
            replace(params, temperature=temperature, max_new_tokens=tokens),
            policy.generator,
        )
        parts.append((members, generation))
    hints = [""] * len(instructed)
    counts["self_hints"], counts["self_hint_tokens"] = len(asking), 0
    if parts:
        merged = merge_generations(parts, 1, policy.pad_token_id)
        lengths = merged.completion_mask.sum(dim=1).long().tolist()
        texts = completion_texts(
            policy.tokenizer, policy.stop_matcher, [[]] * len(lengths), merged.completion_ids, lengths
        )
        for k, text in zip(prompts.kept, texts, strict=True):
            hints[k] = text.strip()
        counts["self_hint_tokens"] = int(sum(lengths))
    resolved = list(rows)
    for k, i in enumerate(asking):
        resolved[i] = with_resolved_hint(rows[i], hints[k])
    return resolved


def split_by(keys: list[Hashable]) -> list[tuple[Hashable, list[int]]]:
    """``(key, indices)`` for each distinct key, in order of first appearance."""
    groups: dict[Hashable, list[int]] = {}
    for index, key in enumerate(keys):
        groups.setdefault(key, []).append(index)
    return list(groups.items())


def merge_generations(parts: list[tuple[list[int], Generation]], group_size: int, pad_token_id: int) -> Generation:
    """One :class:`Generation` of ``R × group_size`` samples from engine calls over subsets of the ``R`` prompts:
    ``parts[k] = (prompt indices, generation of those prompts' samples)``; completions are right-padded (ids with
    ``pad_token_id``) to the longest and put back in prompt order."""
    rows = sum(len(indices) for indices, _ in parts) * group_size
    width = max(part.completion_ids.shape[1] for _, part in parts)
    device = parts[0][1].completion_ids.device
    ids = torch.full((rows, width), pad_token_id, dtype=torch.long, device=device)  # [N, C]
    mask = torch.zeros(rows, width, device=device)  # [N, C]
    logp = torch.zeros(rows, width, device=device)  # [N, C]
    truncated = torch.zeros(rows, dtype=torch.bool, device=device)  # [N]
    for indices, part in parts:
        target = sample_positions(indices, group_size, device)  # [n]
        columns = part.completion_ids.shape[1]
        ids[target, :columns] = part.completion_ids
        mask[target, :columns] = part.completion_mask.float()
        logp[target, :columns] = part.logp.float()
        truncated[target] = part.truncated
    return Generation(completion_ids=ids, completion_mask=mask, logp=logp, truncated=truncated)


def merge_trees(parts: list[tuple[list[int], PrefixTree]], group_size: int) -> PrefixTree:
    """The sampling trees of several engine calls as one tree structure (node ids offset so that they stay unique),
    in prompt order (see :func:`merge_generations`)."""
    rows = sum(len(indices) for indices, _ in parts) * group_size
    width = max(tree.node_of_action.shape[1] for _, tree in parts)
    device = parts[0][1].node_of_action.device
    nodes = torch.zeros(rows, width, dtype=torch.long, device=device)  # [N, T]
    depth = torch.zeros(rows, width, dtype=torch.long, device=device)  # [N, T]
    offset = 0
    for indices, tree in parts:
        target = sample_positions(indices, group_size, device)  # [n]
        columns = tree.node_of_action.shape[1]
        nodes[target, :columns] = tree.node_of_action + offset
        depth[target, :columns] = tree.depth
        offset += int(tree.node_of_action.max()) + 1 if tree.node_of_action.numel() else 0
    return PrefixTree(node_of_action=nodes, depth=depth)


def sample_positions(prompt_indices: list[int], group_size: int, device: torch.device | str = "cpu") -> Tensor:
    """``[len × group_size]`` long: the sample rows of ``prompt_indices`` when each prompt has ``group_size``
    consecutive samples."""
    prompts = torch.tensor(prompt_indices, dtype=torch.long, device=device)
    return (prompts[:, None] * group_size + torch.arange(group_size, device=device)).flatten()


def completion_texts(
    tokenizer, stop_matcher, prefixes: list[list[int]], completion_ids: Tensor, lengths: list[int]
) -> list[str]:
    """What reward functions read for each sample: the decoded prefix (guidance, when any) followed by the decoded
    completion cut at the first stop string. ``prefixes[i]`` are sample ``i``'s prefix token ids, ``completion_ids``
    ``[N, C]``. The two parts are decoded together, so the tokenizer's spacing between them is kept."""
    texts = []
    for prefix, ids, length in zip(prefixes, completion_ids, lengths, strict=True):
        tokens = ids[:length].tolist()
        if not prefix:
            texts.append(stop_matcher.cut(tokenizer.decode(tokens, skip_special_tokens=True)))
            continue
        head = tokenizer.decode(prefix, skip_special_tokens=True)
        whole = tokenizer.decode(prefix + tokens, skip_special_tokens=True)
        tail = whole[len(head) :] if whole.startswith(head) else tokenizer.decode(tokens, skip_special_tokens=True)
        texts.append(head + stop_matcher.cut(tail))
    return texts


__all__ = [
    "GUIDANCE_KEYS",
    "SELF_HINT_OPTIONS",
    "RowGuidance",
    "append_to_prompt",
    "completion_texts",
    "conditioning_only",
    "merge_generations",
    "merge_trees",
    "read_guidance",
    "sample_positions",
    "sample_self_hints",
    "split_by",
    "with_resolved_hint",
]
