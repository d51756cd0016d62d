"""Rollout-time measurements of causal-LM completions for credit rules that need an extra model pass.

Each function fills one declared rollout signal (``Rollout.structure``); the causal-LM family
calls :func:`probe_structure` after sampling, for the fields the configured methods request, with the weights that
sampled the rollout (eval mode, no gradient). Options live in ``policy.probes`` (:class:`ProbeOptions`).

* ``teacher_logp`` ``[N, T]`` (RLSD [132]): the completion re-scored by the same model with the row's reference answer
  added to the prompt (``teacher_hint``, inside the user turn of a chat prompt), at the sampling temperature.
* ``answer_probe`` ``[N, S + 1, 3]`` (belief probing [194], SPAE [193]): for every segment state ``k`` (the prompt and
  the first ``k`` segments of ``segment_ids``), the reference answer is teacher-forced after ``answer_prefix``; the
  channels are the answer's log-probability, the mean probability of its tokens and the mean entropy of the next-token
  distributions at its tokens, at temperature 1 (the model's own belief). The answer is tokenized on its own, so a
  tokenizer that would merge it with the prefix differently sees slightly different tokens.
* ``segment_values`` ``[N, S + 1]`` (SPO-chain [41]): ``value_samples`` continuations are sampled (training sampler
  settings) from every inner segment state and scored with the trainer's combined reward; state 0 is the group's mean
  reward (the group's samples are Monte-Carlo rollouts from the prompt) and state ``S_i`` the sample's own reward. A
  continuation gets the token budget the completion had left (``max_new_tokens − prefix length``).
* ``block_ids`` ``[N, T]`` (blockwise advantages [56]): the number of ``block_markers`` (found in order in the decoded
  completion) whose first character lies in a token at or before each action.
* ``prefix_rewards`` ``[N, S + 1]`` (Rank-GRPO [104]): the trainer's combined reward of the completion cut after every
  segment state (no generation: the decoded prefix is scored as it is, one reward call per state); state ``S_i`` is
  the sample's own output.
* ``counterfactual_logp`` ``[N, T]`` (CoRT [275]): the completion re-scored by the same model under the row's
  counterfactual prompt (``counterfactual_column``, e.g. the prompt without its rubric), at the sampling temperature.
* ``token_judgement`` ``[N, T]`` (token-level judges: [105], [155], [169], [205], [224], [247]): the spans the configured
  token judge (``token_judge.judge``, :mod:`genalign.rewards.token_judges`) marks in each completion, as the value of
  every token (:func:`~genalign.rewards.token_judges.token_values`), over ``token_judge.votes`` calls combined by
  ``token_judge.vote`` (:func:`judge_tokens`, which the VLM family calls too). The judge reads the concatenated text of the completion's tokens, so character offsets and
  tokens agree.
* ``constraint_relevance`` ``[N, T, C]`` (RTT [274]): 1 where the ``c``-th of ``relevance_judges`` marks the token
  (any value), else 0: the tokens relevant to each rubric constraint.
* ``attention_entropy``, ``answer_attention_flow``, ``answer_saliency`` ``[N, T]`` ([272], [299], [269]): readings
  of the model's attention maps and gradient saliency (:mod:`genalign.policies.lm.internals`).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Protocol

import torch
from torch import Tensor

from genalign.policies.base import RewardProbe, Rollout, RolloutRequest
from genalign.policies.lm.core import eval_mode
from genalign.policies.lm.internals import INTERNAL_FIELDS, internal_structure
from genalign.policies.lm.logprobs import completion_scores
from genalign.policies.lm.options import PROBED_FIELDS, ProbeOptions, TokenJudgeOptions
from genalign.policies.lm.prompts import encode_prompts
from genalign.rewards.token_judges import combine_votes, token_judge, token_values


class CausalLMPolicy(Protocol):
    """What the probes use of :class:`genalign.policies.lm.causal.CausalLMPolicy`."""

    config: Any  # CausalLMPolicyConfig (``probes``, ``temperature``, ``logprob_chunk_size``)
    model: Any
    hf_model: Any
    tokenizer: Any
    device: torch.device
    pad_token_id: int
    engine: Any
    generator: torch.Generator
    stop_matcher: Any
    segments: Any

    def sampling_params(self, mode: str) -> Any: ...


def segment_ends(segment_ids: Tensor, mask: Tensor) -> list[list[int]]:
    """For each sample, ``[b_0 = 0, b_1, ..., b_S]``: state ``k`` is the completion's first ``b_k`` tokens (``b_k`` is
    where segment ``k`` starts, ``b_S`` the completion length). ``segment_ids`` / ``mask`` ``[N, T]``."""
    ends = []
    for ids, valid in zip(segment_ids.tolist(), (mask > 0).tolist(), strict=True):
        length = sum(valid)
        starts = [t for t in range(1, length) if ids[t] != ids[t - 1]]
        ends.append([0, *starts, length])
    return ends


def left_pad(sequences: list[list[int]], pad_id: int) -> tuple[Tensor, Tensor]:
    """``(ids, mask)`` ``[B, L]`` long, left-padded."""
    width = max(len(s) for s in sequences)
    ids = torch.full((len(sequences), width), pad_id, dtype=torch.long)
    mask = torch.zeros(len(sequences), width, dtype=torch.long)
    for row, seq in enumerate(sequences):
        if seq:
            ids[row, width - len(seq) :] = torch.tensor(seq)
            mask[row, width - len(seq) :] = 1
    return ids, mask


def _answers(rows: list[dict[str, Any]], column: str) -> list[str]:
    missing = [i for i, row in enumerate(rows) if column not in row]
    if missing:
        raise ValueError(
            f"the rollout probes need the reference answer in column {column!r} (policy.probes.answer_column), "
            f"which row {missing[0]} lacks (columns: {sorted(rows[missing[0]])})."
        )
    return [str(row[column]) for row in rows]


def _sequences(rollout: Rollout) -> tuple[list[list[int]], list[list[int]]]:
    """Real prompt ids and completion ids of every sample."""
    data = rollout.per_sample
    prompts = [ids[m > 0].tolist() for ids, m in zip(data["prompt_ids"].cpu(), data["prompt_mask"].cpu(), strict=True)]
    completions = [
        ids[m > 0].tolist() for ids, m in zip(data["completion_ids"].cpu(), data["completion_mask"].cpu(), strict=True)
    ]
    return prompts, completions


@torch.no_grad()
def _score(policy: CausalLMPolicy, contexts: list[list[int]], targets: list[list[int]], temperature: float):
    """Teacher-forced log-probs and entropies ``[B, L]`` of ``targets`` after ``contexts`` (right-padded, with mask)."""
    prompt_ids, prompt_mask = left_pad(contexts, policy.pad_token_id)
    width = max(len(t) for t in targets)
    target_ids = torch.full((len(targets), width), policy.pad_token_id, dtype=torch.long)
    target_mask = torch.zeros(len(targets), width, dtype=torch.long)
    for row, seq in enumerate(targets):
        target_ids[row, : len(seq)] = torch.tensor(seq, dtype=torch.long)
        target_mask[row, : len(seq)] = 1
    device = policy.device
    scores = completion_scores(
        policy.model,
        prompt_ids.to(device),
        prompt_mask.to(device),
        target_ids.to(device),
        target_mask.to(device),
        temperature=temperature,
        chunk_size=policy.config.logprob_chunk_size,
        with_entropy=True,
    )
    return scores.logp.cpu(), scores.entropy.cpu(), target_mask.float()


def hinted_row(row: dict[str, Any], hint: str) -> dict[str, Any]:
    """``row`` with ``hint`` appended to its prompt: to the text, or to the last user message of a chat prompt."""
    prompt = row["prompt"]
    if isinstance(prompt, str):
        return {**row, "prompt": prompt + hint}
    messages = [dict(m) for m in prompt]
    last_user = max((i for i, m in enumerate(messages) if m["role"] == "user"), default=len(messages) - 1)
    messages[last_user]["content"] = f"{messages[last_user]['content']}{hint}"
    return {**row, "prompt": messages}


def teacher_logprobs(policy: CausalLMPolicy, rollout: Rollout) -> Tensor:
    """``[N, T]`` log-probs of the sampled actions after the prompt with ``teacher_hint`` (the reference answer) added
    to it, rendered like the policy's prompts (inside the user turn with a chat template; never truncated)."""
    options: ProbeOptions = policy.config.probes
    answers = _answers(rollout.rows, options.answer_column)
    rows = [
        hinted_row(row, options.teacher_hint.format(answer=a)) for row, a in zip(rollout.rows, answers, strict=True)
    ]
    return _rescored_under(policy, rollout, rows)


def counterfactual_logprobs(policy: CausalLMPolicy, rollout: Rollout) -> Tensor:
    """``[N, T]`` log-probs of the sampled actions after each row's counterfactual prompt (the row's
    ``counterfactual_column``: a text or chat messages, rendered like the policy's prompts; never truncated)."""
    column = policy.config.probes.counterfactual_column
    if column is None:
        raise ValueError(
            "counterfactual_logp needs policy.probes.counterfactual_column: the row column of the prompt "
            "each completion is re-scored under."
        )
    missing = [i for i, row in enumerate(rollout.rows) if row.get(column) in (None, "")]
    if missing:
        raise ValueError(
            f"counterfactual_logp re-scores each completion under the prompt in column {column!r} "
            f"(policy.probes.counterfactual_column), which row {missing[0]} lacks or leaves empty (columns: "
            f"{sorted(rollout.rows[missing[0]])}); add that column to the data or point the option at it."
        )
    return _rescored_under(policy, rollout, [{**row, "prompt": row[column]} for row in rollout.rows])


def _rescored_under(policy: CausalLMPolicy, rollout: Rollout, rows: list[dict]) -> Tensor:
    """``[N, T]`` log-probs of every sample's completion after the prompt of ``rows[i]`` (rendered like the policy's
    prompts, never truncated) at the sampling temperature, ``policy.probes.batch_size`` samples a pass, 0 on
    padding."""
    cfg = policy.config
    encoded = encode_prompts(
        rows,
        policy.tokenizer,
        use_chat_template=cfg.use_chat_template,
        system_prompt=cfg.system_prompt,
        max_prompt_tokens=None,
        on_long_prompt="error",
        pad_token_id=policy.pad_token_id,
    )
    prompts = [ids[m > 0].tolist() for ids, m in zip(encoded.ids, encoded.mask, strict=True)]
    _, completions = _sequences(rollout)
    result = torch.zeros(rollout.action_mask.shape)
    size = cfg.probes.batch_size
    for start in range(0, len(rollout), size):
        part = range(start, min(start + size, len(rollout)))
        logp, _, mask = _score(policy, [prompts[i] for i in part], [completions[i] for i in part], cfg.temperature)
        result[start : part.stop, : logp.shape[1]] = logp * mask
    return result


def answer_probe(policy: CausalLMPolicy, rollout: Rollout, segment_ids: Tensor) -> Tensor:
    """``[N, S + 1, 3]`` answer log-prob, mean token probability and mean entropy at every segment state."""
    options: ProbeOptions = policy.config.probes
    answers = _answers(rollout.rows, options.answer_column)
    prompts, completions = _sequences(rollout)
    tokenizer = policy.tokenizer
    prefix = tokenizer.encode(options.answer_prefix, add_special_tokens=False)
    ends = segment_ends(segment_ids.cpu(), rollout.action_mask.cpu())
    jobs = [(i, k, b) for i, bounds in enumerate(ends) for k, b in enumerate(bounds)]
    answer_ids = [tokenizer.encode(a, add_special_tokens=False) for a in answers]
    result = torch.full((len(rollout), max(len(b) for b in ends), 3), float("nan"))
    for start in range(0, len(jobs), options.batch_size):
        part = [job for job in jobs[start : start + options.batch_size] if answer_ids[job[0]]]
        if not part:
            continue
        contexts = [prompts[i] + completions[i][:b] + prefix for i, _, b in part]
        logp, entropy, mask = _score(policy, contexts, [answer_ids[i] for i, _, _ in part], 1.0)
        count = mask.sum(1)  # [B]
        values = torch.stack(
            [(logp * mask).sum(1), (logp.exp() * mask).sum(1) / count, (entropy * mask).sum(1) / count], dim=1
        )  # [B, 3]
        for (i, k, _), value in zip(part, values, strict=True):
            result[i, k] = value
    return result


@torch.no_grad()
def segment_values(
    policy: CausalLMPolicy, rollout: Rollout, segment_ids: Tensor, reward_probe: RewardProbe | None
) -> Tensor:
    """``[N, S + 1]`` Monte-Carlo values of the segment states (module docstring)."""
    if reward_probe is None:
        raise ValueError("RolloutRequest asks for segment_values without a reward_probe to measure them.")
    options: ProbeOptions = policy.config.probes
    prompts, completions = _sequences(rollout)
    ends = segment_ends(segment_ids.cpu(), rollout.action_mask.cpu())
    own = reward_probe(rollout.rows, rollout.outputs).float().cpu()  # [N]
    groups = rollout.group_ids.cpu()
    group_mean = torch.zeros(int(groups.max()) + 1).index_add_(0, groups, own)
    group_mean = group_mean / torch.bincount(groups).float().clamp_min(1)  # [G]
    values = torch.full((len(rollout), max(len(b) for b in ends)), float("nan"))
    for i, bounds in enumerate(ends):
        values[i, 0], values[i, len(bounds) - 1] = group_mean[groups[i]], own[i]
    jobs = [(i, k, b) for i, bounds in enumerate(ends) for k, b in enumerate(bounds[:-1]) if k > 0]
    params = policy.sampling_params("train")
    per_call = max(1, options.batch_size // options.value_samples)
    for start in range(0, len(jobs), per_call):
        part = jobs[start : start + per_call]
        budget = params.max_new_tokens - min(b for _, _, b in part)
        contexts = [prompts[i] + completions[i][:b] for i, _, b in part for _ in range(options.value_samples)]
        ids, mask = left_pad(contexts, policy.pad_token_id)
        generation = policy.engine.generate(
            ids.to(policy.device), mask.to(policy.device), replace(params, max_new_tokens=budget), policy.generator
        )
        lengths = generation.completion_mask.sum(1).long().tolist()
        outputs, rows = [], []
        for j, (i, _, b) in enumerate(job for job in part for _ in range(options.value_samples)):
            keep = min(lengths[j], params.max_new_tokens - b)
            tokens = completions[i][:b] + generation.completion_ids[j, :keep].tolist()
            outputs.append(policy.stop_matcher.cut(policy.tokenizer.decode(tokens, skip_special_tokens=True)))
            rows.append(rollout.rows[i])
        rewards = reward_probe(rows, outputs).float().cpu().view(len(part), options.value_samples)
        for (i, k, _), mean in zip(part, rewards.mean(1), strict=True):
            values[i, k] = mean
    return values


@torch.no_grad()
def prefix_rewards(
    policy: CausalLMPolicy, rollout: Rollout, segment_ids: Tensor, reward_probe: RewardProbe | None
) -> Tensor:
    """``[N, S + 1]`` the reward of every segment state's text (module docstring); NaN past a sample's last state."""
    if reward_probe is None:
        raise ValueError("RolloutRequest asks for prefix_rewards without a reward_probe to measure them.")
    _, completions = _sequences(rollout)
    ends = segment_ends(segment_ids.cpu(), rollout.action_mask.cpu())
    rows, outputs, places = [], [], []
    for i, bounds in enumerate(ends):
        for k, bound in enumerate(bounds):
            if k == len(bounds) - 1:
                output = rollout.outputs[i]  # the sample's own output
            else:
                output = policy.stop_matcher.cut(
                    policy.tokenizer.decode(completions[i][:bound], skip_special_tokens=True)
                )
            rows.append(rollout.rows[i])
            outputs.append(output)
            places.append((i, k))
    values = torch.full((len(rollout), max(len(b) for b in ends)), float("nan"))
    size = policy.config.probes.batch_size
    for start in range(0, len(rows), size):
        scores = reward_probe(rows[start : start + size], outputs[start : start + size]).float().cpu()
        for (i, k), score in zip(places[start : start + size], scores.tolist(), strict=True):
            values[i, k] = score
    return values


def block_ids(tokenizer, completion_ids: Tensor, mask: Tensor, markers: list[str]) -> Tensor:
    """``[N, T]`` long block index of every action (module docstring); padding continues the last block."""
    result = torch.zeros(completion_ids.shape, dtype=torch.long)
    for row, (ids, valid) in enumerate(zip(completion_ids.cpu().tolist(), (mask.cpu() > 0).tolist(), strict=True)):
        pieces = [tokenizer.decode([token], skip_special_tokens=True) for token, v in zip(ids, valid, strict=True) if v]
        ends = torch.tensor([len(p) for p in pieces]).cumsum(0).tolist() if pieces else []
        text, position = "".join(pieces), 0
        for marker in markers:
            found = text.find(marker, position)
            if found < 0:
                break
            token = next(t for t, end in enumerate(ends) if end > found)
            result[row, token:] += 1
            position = found + len(marker)
    return result


def token_pieces(tokenizer, completion_ids: Tensor, mask: Tensor) -> list[tuple[str, list[int]]]:
    """For each completion ``[N, T]``: its text as the concatenation of its real tokens' texts, and the character
    where each real token ends."""
    texts = []
    for ids, valid in zip(completion_ids.cpu().tolist(), (mask.cpu() > 0).tolist(), strict=True):
        pieces = [tokenizer.decode([token], skip_special_tokens=True) for token, v in zip(ids, valid, strict=True) if v]
        ends, total = [], 0
        for piece in pieces:
            total += len(piece)
            ends.append(total)
        texts.append(("".join(pieces), ends))
    return texts


def judge_tokens(
    tokenizer, completion_ids: Tensor, mask: Tensor, rows: list[dict[str, Any]], options: TokenJudgeOptions
) -> Tensor:
    """``[N, T]`` the value the configured token judge gives every action of ``completion_ids`` ``[N, T]`` (real
    tokens ``mask``), over ``options.votes`` calls combined by ``options.vote`` (module docstring); 0 on padding."""
    judge = token_judge(options.judge.name, options.judge.args)
    texts = token_pieces(tokenizer, completion_ids, mask)
    votes = [judge([text for text, _ in texts], rows) for _ in range(options.votes)]  # [V][N] spans
    result = torch.zeros(mask.shape, dtype=torch.float32)
    for i, (_, ends) in enumerate(texts):
        values = combine_votes([token_values(vote[i], ends) for vote in votes], options.vote)
        positions = (mask[i].cpu() > 0).nonzero().flatten()
        result[i, positions] = torch.tensor(values, dtype=torch.float32)
    return result


def constraint_relevance(policy: CausalLMPolicy, rollout: Rollout) -> Tensor:
    """``[N, T, C]`` the tokens each of ``policy.probes.relevance_judges`` marks (module docstring)."""
    ids, mask = rollout.per_sample["completion_ids"], rollout.action_mask
    channels = [judge_tokens(policy.tokenizer, ids, mask, rollout.rows, TokenJudgeOptions(judge=judge)) != 0
                for judge in policy.config.probes.relevance_judges]  # fmt: skip
    return torch.stack(channels, -1).float()


def token_judgement(policy: CausalLMPolicy, rollout: Rollout) -> Tensor:
    """``[N, T]`` the ``token_judgement`` of a causal-LM rollout (``policy.probes.token_judge``)."""
    ids = rollout.per_sample["completion_ids"]
    return judge_tokens(policy.tokenizer, ids, rollout.action_mask, rollout.rows, policy.config.probes.token_judge)


def probe_structure(policy: CausalLMPolicy, rollout: Rollout, request: RolloutRequest) -> Rollout:
    """``rollout`` with the probe fields that ``request`` names filled in (module docstring), measured in eval mode."""
    wanted = set(request.structure) & set(PROBED_FIELDS)
    if not wanted or not len(rollout):
        return rollout
    segments = rollout.structure.get("segment_ids")
    if segments is None and wanted & {"segment_values", "answer_probe", "prefix_rewards"}:
        segments = policy.segments(rollout.per_sample["completion_ids"], rollout.action_mask)
    values: dict[str, Tensor] = {}
    with eval_mode(policy.model):
        if "teacher_logp" in wanted:
            values["teacher_logp"] = teacher_logprobs(policy, rollout)
        if "answer_probe" in wanted:
            values["answer_probe"] = answer_probe(policy, rollout, segments)
        if "segment_values" in wanted:
            values["segment_values"] = segment_values(policy, rollout, segments, request.reward_probe)
        if "counterfactual_logp" in wanted:
            values["counterfactual_logp"] = counterfactual_logprobs(policy, rollout)
        if wanted & set(INTERNAL_FIELDS):
            values |= internal_structure(policy, rollout, wanted)
    if "prefix_rewards" in wanted:
        values["prefix_rewards"] = prefix_rewards(policy, rollout, segments, request.reward_probe)
    if "token_judgement" in wanted:
        values["token_judgement"] = token_judgement(policy, rollout)
    if "constraint_relevance" in wanted:
        values["constraint_relevance"] = constraint_relevance(policy, rollout)
    if "block_ids" in wanted:
        ids = rollout.per_sample["completion_ids"]
        values["block_ids"] = block_ids(policy.tokenizer, ids, rollout.action_mask, policy.config.probes.block_markers)
    rollout.add_structure(**values)
    return rollout


__all__ = [
    "PROBED_FIELDS",
    "ProbeOptions",
    "answer_probe",
    "block_ids",
    "constraint_relevance",
    "counterfactual_logprobs",
    "hinted_row",
    "judge_tokens",
    "left_pad",
    "prefix_rewards",
    "probe_structure",
    "segment_ends",
    "segment_values",
    "teacher_logprobs",
    "token_judgement",
    "token_pieces",
]
