"""Multi-turn rollouts of the token-LM families: the model takes turns with an environment (``policy.multi_turn``).

The turn loop here is shared: starting the episodes, asking the environment, the limits, the failure counts and the
layout of the rollout are family-independent. A family supplies a :class:`TurnFamily`: how a prompt becomes ids (and
its non-token inputs, e.g. a VLM's images), one sampling call for the active trajectories, and how the environment's
answer becomes the suffix appended to a trajectory (ids, and the images among them). :class:`TextTurns` is the
causal-LM family's; the VLM family's is :class:`genalign.policies.vlm.multi_turn.ImageTurns`.

Per trajectory (``group_size`` per row, one environment instance each, :class:`~genalign.environments.EnvironmentSet`
choosing it by the row's column): ``reset`` may give the first observation, appended to the prompt's last user
message; the prompt is rendered with the chat template and the episode's tool schemas. Then, while trajectories are
active, one engine call samples a turn for every active one (a turn ends at an end-of-sequence token, the template's
end-of-turn token, or ``policy.max_new_tokens``; the causal-LM family's static engine continues each trajectory's KV
cache from its last turn, :mod:`genalign.policies.lm.engines.turn_cache`, other engines re-encode the whole
conversation); each turn goes to ``environment.step`` (tool calls parsed and run
there: in parallel, with timeouts and output caps, every failure an error observation of a counted kind), and what the
environment answers is rendered with the chat template and appended as a suffix (:mod:`genalign.policies.lm.chat_turns`:
earlier turns are never tokenized again; a template that is not prefix-preserving is refused).

A trajectory ends when the environment says ``done``, or *truncated* at ``max_turns``, at ``max_total_tokens``, or when
an answer is longer than ``max_observation_tokens`` (it is then not appended). An environment that raises in
``reset``, ``step`` or ``reward`` is counted and ends its trajectory (after one turn for ``reset``; the reward of an
episode whose ``step`` raised is not read, the reward functions score it), and so does an answer the family cannot
show the model (:class:`ObservationError`, e.g. an unreadable image; truncated); nothing an environment or the model
does stops the run, except a chat template that is not prefix-preserving (a configuration error).

Agent methods in the loop (each off by default): ``multi_turn.tree`` samples a training group as trees that branch
before a turn, the branches sharing the prefix's tokens, an environment copy and the family's held cache
(:mod:`genalign.policies.lm.turn_trees`, Tree-GRPO [165]); ``multi_turn.thinking_intervention`` and
``multi_turn.resample_turns`` cut a turn whose uncertainty stops changing and continue it after a given text, or take
back a turn without progress and sample it again (:mod:`genalign.policies.lm.turn_control`, T²PO [171]); the
``turn_roles`` structure is the segment judge's role of each accepted turn (:mod:`genalign.environments.judges`,
TRIAGE [8]).

Counts (``Rollout.counts``, logged as ``rollout/<key>`` and summed over a held-out evaluation as
``eval/rollout/<key>``): ``turns``, ``trajectories``, the limits hit, ``tools/<outcome>`` (the episodes'
``TurnRecord.counts``), ``environment_errors/<stage>`` and ``generated_tokens``; ``Rollout.info`` has
``completion_tokens`` and ``turns_per_trajectory``.

What the backend sees: ``per_sample`` holds the prompt ids (left-padded) and one completion ``[N, C]`` per sample, the
model's turns and the environment's tokens in order; ``completion_mask`` (the action mask, ``Rollout.action_mask``) is
1 on model tokens only, ``completion_attention`` 1 on every token; a family adds its own inputs (a VLM's images).
Behaviour log-probs are recorded on model tokens, 0 elsewhere; ``score`` runs the family's single-turn scoring pass over
the same ids with the environment tokens as attended context, so re-scoring reproduces the sampled sequence token for
token.

Rewards: each sample's row gets the column ``environment_reward`` (the environment's episode reward, None where it
owns none); the reward functions receive the whole transcript after the prompt (model turns and the environment's
rendered messages, decoded without special tokens) as the completion. The ``environment`` reward returns that column
(with a fallback reward for episodes without one): :mod:`genalign.rewards.environment`.
"""

from __future__ import annotations

import itertools
import math
from collections import Counter
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal, Protocol

import torch
from torch import Tensor

from genalign.environments import Episode, ModelTurn, StepResult, episode_reward, resolve
from genalign.environments.branching import checkpoint
from genalign.environments.judges import TurnSegment
from genalign.policies.base import GUIDANCE_KEY, Rollout, RolloutRequest
from genalign.policies.lm.chat_turns import ChatRenderer, Message, text_content
from genalign.policies.lm.core import completion_structure, eval_mode
from genalign.policies.lm.engines.base import Generation, SamplingParams
from genalign.policies.lm.engines.turn_cache import TurnCaches
from genalign.policies.lm.forced import LEFT_PADDED
from genalign.policies.lm.guidance import append_to_prompt, read_guidance
from genalign.policies.lm.multi_turn_options import MULTI_TURN_STRUCTURE
from genalign.policies.lm.turn_control import intervene, mean_surprisal, take_back, without_progress
from genalign.policies.lm.turn_trees import finished_copy, turn_prefix_tree, turn_tree

#: the row column that carries a sample's episode reward to the reward functions
ENVIRONMENT_REWARD_COLUMN = "environment_reward"
#: One sampled turn: its token ids, their behaviour log-probs, and whether it hit its token budget before an end token.
SampledTurn = tuple[list[int], list[float], bool]


@dataclass
class Trajectory:
    """One sample's episode so far: the prompt ids and the completion laid out position by position, and the family's
    non-token inputs of both (``media``: a VLM's images, in sequence order)."""

    row: dict[str, Any]
    episode: Episode | None
    messages: list[dict[str, Any]]
    prompt: list[int]
    index: int = 0  # the row's index in the rollout's rows (for messages)
    number: int = 0  # the trajectory's index in the rollout (names its kept KV cache)
    media: list[Any] = field(default_factory=list)
    ids: list[int] = field(default_factory=list)  # model and environment tokens after the prompt
    actions: list[float] = field(default_factory=list)  # 1 on model tokens
    logp: list[float] = field(default_factory=list)  # behaviour log-probs, 0 on environment tokens
    turn_ids: list[int] = field(default_factory=list)
    turn_rewards: list[float] = field(default_factory=list)
    tool_calls: int = 0
    done: bool = False
    truncated: bool = False
    failed: bool = False  # the environment raised in step: its reward is not read
    reward: float | None = None
    source: dict[str, Any] = field(default_factory=dict)  # the dataset row (environments of branches start from it)
    turn: int = 0  # accepted model turns so far (the index of the turn being sampled)
    turn_start: int = 0  # position in ids where the turn being sampled starts
    turn_cut: bool = False  # the turn being sampled hit its token budget
    model_turns: list[ModelTurn] = field(default_factory=list)  # the accepted turns, as the environment got them
    answers: list[str] = field(default_factory=list)  # the text of the environment's answer to each accepted turn
    surprisals: list[float] = field(default_factory=list)  # mean surprisal of each accepted turn's sampled tokens
    segments: list[TurnSegment] = field(default_factory=list)  # each accepted turn, for the segment judge
    resamples: int = 0  # turns taken back for lack of progress
    path: list[tuple[int, int, int]] = field(default_factory=list)  # (first position, node, depth) of tree nodes

    @property
    def length(self) -> int:
        return len(self.prompt) + len(self.ids)

    def copy(self, number: int) -> Trajectory:
        """A branch of this trajectory: the same tokens and records, its own lists (the environment is shared
        until the caller gives the copy its own)."""
        lists = ("messages", "media", "ids", "actions", "logp", "turn_ids", "turn_rewards", "model_turns", "answers",
                 "surprisals", "segments", "path")  # fmt: skip
        return replace(self, number=number, **{name: list(getattr(self, name)) for name in lists})

    def begin_turn(self, cut: bool) -> None:
        self.turn_start, self.turn_cut = len(self.ids), cut

    def truncate(self, length: int) -> None:
        """Drop the tokens from position ``length`` on (within the turn being sampled)."""
        assert length >= self.turn_start, "only the turn being sampled is cut"
        for name in ("ids", "actions", "logp", "turn_ids"):
            del getattr(self, name)[length:]

    def turn_logp(self) -> list[float]:
        """The behaviour log-probs of the model tokens of the turn being sampled."""
        pairs = zip(self.logp[self.turn_start :], self.actions[self.turn_start :], strict=True)
        return [logp for logp, action in pairs if action > 0]

    def extend(self, ids: list[int], logp: list[float] | None, turn: int) -> None:
        self.ids += ids
        self.actions += [1.0 if logp is not None else 0.0] * len(ids)
        self.logp += logp if logp is not None else [0.0] * len(ids)
        self.turn_ids += [turn] * len(ids)

    def add_observation(self, observation: ObservationTokens, turn: int) -> None:
        """Append the environment's answer to ``turn``: context tokens (no action, no log-prob), their messages and
        media."""
        self.extend(observation.ids, None, turn)
        self.messages += observation.messages
        self.media += observation.media

    def end(self, *, truncated: bool = False) -> None:
        self.done, self.truncated = True, self.truncated or truncated


@dataclass
class ObservationTokens:
    """The environment's answer to a turn as a trajectory takes it: the ids appended as a suffix, the chat messages
    they render (the model's turn as an assistant message, then the answer) and the family's non-token inputs for
    those ids (a VLM's images), in sequence order."""

    ids: list[int]
    messages: list[Message]
    media: list[Any] = field(default_factory=list)


class TurnFamily(Protocol):
    """What a family gives the shared turn loop (:func:`multi_turn_rollout`)."""

    #: ``per_sample`` keys of :meth:`per_sample` that are left-padded (``Rollout.left_padded``)
    left_padded: frozenset[str]

    def start(self, row: dict[str, Any], index: int, episode: Episode | None, counts: Counter) -> Trajectory:
        """The trajectory of ``row`` (dataset index ``index``), its prompt rendered with ``episode``'s first
        observation and tool schemas (None: ``reset`` failed) and encoded."""
        ...

    def generate(self, active: list[Trajectory], params: SamplingParams, counts: Counter) -> list[SampledTurn]:
        """One turn of every active trajectory, sampled with ``params`` (see :func:`turn_budgets`)."""
        ...

    def observation(
        self, trajectory: Trajectory, ids: list[int], text: str, answer: list[Message]
    ) -> ObservationTokens:
        """What follows the model's turn ``ids`` (decoded: ``text``) when the environment answers with the chat
        messages ``answer``."""
        ...

    def fork(self, parents: list[Hashable], children: list[list[Hashable]]) -> None:
        """Trajectory ``children[i][j]`` (its number) branched from ``parents[i]``: whatever the family holds of the
        parent between turns (a KV cache) is held for the copies too."""
        ...

    def per_sample(self, trajectories: list[Trajectory], prompt_ids: Tensor, completion_ids: Tensor) -> dict[str, Any]:
        """The family's inputs of each sample besides the shared ones (``prompt_ids`` ``[N, P]`` left-padded,
        ``completion_ids`` ``[N, C]``)."""
        ...


class ObservationError(ValueError):
    """The environment's answer cannot be shown to the model (e.g. an image that cannot be read): counted as
    ``environment_errors/observation``; the trajectory ends, truncated."""


def multi_turn_rollout(
    policy: Any,
    rows: list[dict[str, Any]],
    group_size: int,
    mode: Literal["train", "eval"],
    request: RolloutRequest,
    family: TurnFamily,
) -> Rollout:
    """``group_size`` trajectories per row (module docstring); ``policy`` is a token-LM policy with environments
    (``policy.environments``, ``policy.chat_renderer``, ``policy.environment_failures``), ``family`` its side of the
    loop (:class:`TextTurns` for the causal-LM family)."""
    options = policy.config.multi_turn
    renderer: ChatRenderer = policy.chat_renderer
    params = policy.sampling_params(mode)
    params = replace(params, eos_token_ids=tuple(sorted({*params.eos_token_ids, *renderer.end_of_turn_ids()})))
    counts: Counter[str] = Counter()
    tree = turn_tree(policy, family, group_size, mode, counts)
    per_row = options.tree.trees_per_prompt if tree is not None else group_size
    trajectories = [
        _start(policy, family, row, index, counts) for index, row in enumerate(rows) for _ in range(per_row)
    ]
    numbers = itertools.count()
    for trajectory in trajectories:
        trajectory.number = next(numbers)
    if tree is not None:
        tree.plant(trajectories)
    while True:  # every pass ends, accepts or (a bounded number of times) takes back each active trajectory's turn
        if tree is not None:
            trajectories = tree.branch(trajectories, numbers)
        active = [t for t in trajectories if not t.done]
        if not active:
            break
        with eval_mode(policy.model):
            turns = family.generate(active, params, counts)
            for trajectory, (ids, logp, cut) in zip(active, turns, strict=True):
                trajectory.begin_turn(cut)
                trajectory.extend(ids, logp, trajectory.turn)
            if options.thinking_intervention.enabled:
                intervene(policy, family, active, params, counts)
        for trajectory in active:
            _answer(policy, family, trajectory, counts)
    for trajectory in trajectories:
        _finish(trajectory, counts)
    if tree is not None:
        trajectories = tree.complete(trajectories, lambda t: finished_copy(t, next(numbers), counts))
    return _assemble(policy, family, trajectories, group_size, request, counts, tree is not None)


def _start(policy: Any, family: TurnFamily, row: dict[str, Any], index: int, counts: Counter) -> Trajectory:
    """A trajectory of ``row``: its environment started from the row's columns (without the guidance a sample source
    attached; an environment that raises in ``reset`` is counted and the trajectory runs without it: one turn, no
    tools) and its prompt, with the guidance ``hint`` added to the user prompt (:data:`~genalign.policies.lm.multi_turn_options.MULTI_TURN_GUIDANCE`), encoded
    by the family."""
    if "prompt" not in row:
        raise KeyError(f"row {index} has no 'prompt' column (columns: {sorted(row)}); map one with the data mapping.")
    columns = {key: value for key, value in row.items() if key != GUIDANCE_KEY}
    policy.environments.name_for(columns)  # a row that names no environment of the run is a data error: raised
    episode = None
    try:
        episode = policy.environments.start(columns)
    except Exception as err:  # any failure of environment code: counted, never stops the run
        counts["environment_errors/reset"] += 1
        policy.environment_failures.append(f"reset: {type(err).__name__}: {err}")
    hint = read_guidance(row, index).hint
    trajectory = family.start({**row, "prompt": append_to_prompt(row["prompt"], hint)}, index, episode, counts)
    trajectory.row = {**trajectory.row, "prompt": row["prompt"]}  # the data's prompt; the hint stays in the ids
    trajectory.source = columns
    return trajectory


def turn_budgets(
    active: list[Trajectory], params: SamplingParams, max_total_tokens: int | None
) -> tuple[list[int], SamplingParams]:
    """The token budget of each active trajectory's turn (``policy.max_new_tokens``, or what ``max_total_tokens``
    leaves) and the sampling parameters of the call (the largest budget; a turn is cut to its own afterwards)."""
    new = params.max_new_tokens
    budgets = [new if max_total_tokens is None else min(new, max_total_tokens - t.length) for t in active]
    return budgets, replace(params, max_new_tokens=max(1, max(budgets)))


def left_padded_contexts(active: list[Trajectory], pad_token_id: int) -> tuple[Tensor, Tensor]:
    """``ids`` ``[B, L]`` long and ``mask`` ``[B, L]`` long: each trajectory's prompt and completion so far,
    left-padded to the longest."""
    width = max(t.length for t in active)
    ids = torch.full((len(active), width), pad_token_id, dtype=torch.long)  # [B, L] left-padded
    mask = torch.zeros(len(active), width, dtype=torch.long)  # [B, L]
    for row, trajectory in enumerate(active):
        context = trajectory.prompt + trajectory.ids
        ids[row, width - len(context) :] = torch.tensor(context, dtype=torch.long)
        mask[row, width - len(context) :] = 1
    return ids, mask


def kept_turns(generation: Generation, budgets: list[int], counts: Counter) -> list[SampledTurn]:
    """Each row of ``generation`` as a turn, cut to its budget: ``[(ids, logp, cut)]``, ``cut`` when the turn hit its
    budget before an end token; the sampled tokens are counted (``generated_tokens``)."""
    lengths = generation.completion_mask.sum(dim=1).long().tolist()  # [B]
    counts["generated_tokens"] += int(sum(lengths))
    out = []
    for row, (length, budget) in enumerate(zip(lengths, budgets)):
        keep = max(1, min(length, budget))
        cut = bool(generation.truncated[row]) or keep < length
        out.append((generation.completion_ids[row, :keep].tolist(), generation.logp[row, :keep].float().tolist(), cut))
    return out


def _generate_turn(
    policy: Any, active: list[Trajectory], params: Any, counts: Counter, caches: TurnCaches | None
) -> list[SampledTurn]:
    """One engine call for the active trajectories (:func:`kept_turns`): through ``policy.turn_engine`` continuing
    the ``caches`` kept from their last turn, or (``caches`` None) through ``policy.engine`` re-encoding every
    trajectory's whole context."""
    budgets, turn_params = turn_budgets(active, params, policy.config.multi_turn.max_total_tokens)
    if caches is not None:
        contexts = [t.prompt + t.ids for t in active]
        numbers = [t.number for t in active]
        generation = policy.turn_engine.generate(caches, numbers, contexts, turn_params, policy.generator)
    else:
        ids, mask = left_padded_contexts(active, policy.pad_token_id)
        generation = policy.engine.generate(ids.to(policy.device), mask.to(policy.device), turn_params,
                                            policy.generator)  # fmt: skip
    return kept_turns(generation, budgets, counts)


def answer_text(answer: list[Message]) -> str:
    """The text of the environment's answer messages (their roles and text contents; images left out)."""
    return "\n".join(f"{m.get('role')}: {text_content(m.get('content', ''))}" for m in answer)


def _answer(policy: Any, family: TurnFamily, t: Trajectory, counts: Counter) -> None:
    """Give the turn being sampled to the environment and then take it back (no progress: T²PO's resampling), or
    accept it and append the environment's answer (or end the trajectory)."""
    options = policy.config.multi_turn
    ids = t.ids[t.turn_start :]
    text = policy.tokenizer.decode(ids, skip_special_tokens=True)
    counts["turns"] += 1
    if t.episode is None:  # reset failed: one turn, no environment
        t.end()
        return
    turn = ModelTurn(text, index=t.turn, truncated=t.turn_cut)
    resampling = options.resample_turns
    saved, may_resample = None, resampling.enabled and t.resamples < resampling.max_resamples
    if may_resample:
        try:
            saved = checkpoint(t.episode)
        except Exception as err:  # any failure of environment code: counted, the turn cannot be taken back
            counts["environment_errors/checkpoint"] += 1
            policy.environment_failures.append(f"checkpoint: {type(err).__name__}: {err}")
            may_resample = False
    try:
        result: StepResult = resolve(t.episode.environment.step(turn))
    except Exception as err:  # any failure of environment code: counted, never stops the run
        counts["environment_errors/step"] += 1
        policy.environment_failures.append(f"step: {type(err).__name__}: {err}")
        t.failed = True
        t.end()
        return
    record_counts = dict(result.record.counts)
    counts.update({f"tools/{key}": value for key, value in record_counts.items()})
    answer = result.messages()
    said, surprisal = answer_text(answer), mean_surprisal(t.turn_logp())
    previous = t.surprisals[-1] if t.surprisals else None
    stalled = may_resample and not result.done and without_progress(resampling, said, t.answers, surprisal, previous)
    if stalled and take_back(policy, t, saved, counts):
        return
    t.tool_calls += record_counts.get("calls", 0)
    t.turn_rewards.append(math.nan if result.reward is None else float(result.reward))
    t.model_turns.append(turn)
    t.answers.append(said)
    t.surprisals.append(surprisal)
    t.segments.append(TurnSegment(t.turn, text, result.record, said, result.reward, result.done))
    t.turn += 1
    if result.done or t.done:  # t.done: a failed rewind ended it
        t.end()
        return
    if t.turn >= options.max_turns:
        t.end(truncated=True)  # without rendering an answer no turn will read
        return
    try:
        suffix = family.observation(t, ids, text, answer)
    except ObservationError as err:  # the environment answered with what the model cannot be shown: counted
        counts["environment_errors/observation"] += 1
        policy.environment_failures.append(f"observation: {err}")
        t.end(truncated=True)
        return
    total = options.max_total_tokens
    if len(suffix.ids) > options.max_observation_tokens:
        counts["observations_too_long"] += 1
        t.end(truncated=True)
    elif total is not None and t.length + len(suffix.ids) >= total:
        counts["trajectories_at_max_total_tokens"] += 1
        t.end(truncated=True)
    else:
        t.add_observation(suffix, t.turn - 1)


def _turn_roles(policy: Any, trajectories: Sequence[Trajectory], width: int, counts: Counter) -> Tensor:
    """``[N, K]`` long: 1 + the segment judge's role of each accepted turn (:mod:`genalign.environments.judges`), 0
    where a sample has no such turn or the judge failed on it (counted as ``judge_errors``)."""
    judge = policy.segment_judge
    roles = torch.zeros(len(trajectories), width, dtype=torch.long)  # [N, K]
    for i, trajectory in enumerate(trajectories):
        if not trajectory.segments:
            continue
        try:
            judged = [int(role) for role in judge(trajectory.segments, counts)]
        except Exception as err:  # a judge is configured code: counted, the sample gets no role
            counts["judge_errors"] += 1
            policy.environment_failures.append(f"judge: {type(err).__name__}: {err}")
            continue
        if len(judged) != len(trajectory.segments):
            counts["judge_errors"] += 1
            continue
        roles[i, : len(judged)] = torch.tensor(judged, dtype=torch.long) + 1
    return roles


class TextTurns:
    """The causal-LM family's side of the turn loop: prompts rendered with the chat template and tokenized (within
    ``policy.max_prompt_tokens``), turns sampled by ``policy.turn_engine`` with each trajectory's KV cache kept
    between its turns (the static engine, :mod:`genalign.policies.lm.engines.turn_cache`) or else by
    ``policy.engine`` re-encoding the whole conversation every turn (hf, vllm, or ``multi_turn.keep_kv_cache=false``),
    answers as text (images dropped). One instance serves one rollout (it holds the rollout's caches)."""

    left_padded: frozenset[str] = frozenset()

    def __init__(self, policy: Any) -> None:
        self.policy = policy
        self.caches = TurnCaches() if policy.turn_engine is not None else None

    def start(self, row: dict[str, Any], index: int, episode: Episode | None, counts: Counter) -> Trajectory:
        policy, renderer = self.policy, self.policy.chat_renderer
        observation = episode.observation if episode is not None else None
        messages = renderer.prompt_messages(row["prompt"], observation, index)
        tools = episode.tool_schemas if episode is not None else []
        prompt = renderer.encode(renderer.render(messages, tools, generation_prompt=True))
        limit = policy.config.max_prompt_tokens
        if limit is not None and len(prompt) > limit:
            if policy.config.on_long_prompt == "error":
                raise ValueError(
                    f"row {index}: the multi-turn prompt has {len(prompt)} tokens, more than policy.max_prompt_tokens="
                    f"{limit}; raise the limit or set policy.on_long_prompt to 'truncate_left'."
                )
            prompt = prompt[-limit:]
            counts["prompts_truncated"] += 1
        return Trajectory(row=row, episode=episode, messages=messages, prompt=prompt, index=index)

    def generate(self, active: list[Trajectory], params: SamplingParams, counts: Counter) -> list[SampledTurn]:
        return _generate_turn(self.policy, active, params, counts, self.caches)

    def observation(
        self, trajectory: Trajectory, ids: list[int], text: str, answer: list[Message]
    ) -> ObservationTokens:
        assistant = {"role": "assistant", "content": text}
        answer = [{**m, "content": text_content(m["content"])} for m in answer]
        model_text = self.policy.tokenizer.decode(ids, skip_special_tokens=False)
        tools = trajectory.episode.tool_schemas  # an answer exists: the episode started
        suffix = self.policy.chat_renderer.observation_ids(trajectory.messages, tools, assistant, model_text, answer)
        return ObservationTokens(suffix, [assistant, *answer])

    def fork(self, parents: list[Hashable], children: list[list[Hashable]]) -> None:
        if self.caches is not None:
            self.caches.fork(parents, children)

    def per_sample(self, trajectories: list[Trajectory], prompt_ids: Tensor, completion_ids: Tensor) -> dict[str, Any]:
        return {}


def _finish(t: Trajectory, counts: Counter) -> None:
    """The episode's reward and ``close``; failures are counted."""
    counts["trajectories"] += 1
    counts["trajectories_truncated"] += int(t.truncated)
    if t.episode is None:
        return
    environment = t.episode.environment
    try:
        t.reward = None if t.failed else episode_reward(environment)
    except Exception:  # any failure of environment code: counted, the reward functions score the sample
        counts["environment_errors/reward"] += 1
    try:
        environment.close()
    except Exception:
        counts["environment_errors/close"] += 1


def _assemble(
    policy: Any,
    family: TurnFamily,
    trajectories: list[Trajectory],
    group_size: int,
    request: RolloutRequest,
    counts: Counter,
    branched: bool = False,
) -> Rollout:
    """The rollout of finished trajectories (layout in the module docstring); ``branched``: they are the leaves of
    turn-level trees (their paths give the ``prefix_tree``)."""
    n, pad = len(trajectories), policy.pad_token_id
    width = max(len(t.prompt) for t in trajectories)
    length = max(len(t.ids) for t in trajectories)
    prompt_ids = torch.full((n, width), pad, dtype=torch.long)  # [N, P]
    prompt_mask = torch.zeros(n, width, dtype=torch.long)  # [N, P]
    completion_ids = torch.full((n, length), pad, dtype=torch.long)  # [N, C]
    attention = torch.zeros(n, length)  # [N, C]
    actions = torch.zeros(n, length)  # [N, C]
    logp = torch.zeros(n, length)  # [N, C]
    turn_ids = torch.zeros(n, length, dtype=torch.long)  # [N, C]
    turns = max(len(t.turn_rewards) for t in trajectories)
    turn_rewards = torch.full((n, max(1, turns)), math.nan)  # [N, K]
    for i, t in enumerate(trajectories):
        prompt_ids[i, width - len(t.prompt) :] = torch.tensor(t.prompt, dtype=torch.long)
        prompt_mask[i, width - len(t.prompt) :] = 1
        size = len(t.ids)
        completion_ids[i, :size] = torch.tensor(t.ids, dtype=torch.long)
        attention[i, :size] = 1
        actions[i, :size] = torch.tensor(t.actions)
        logp[i, :size] = torch.tensor(t.logp)
        turn_ids[i, :size] = torch.tensor(t.turn_ids, dtype=torch.long)
        turn_ids[i, size:] = t.turn_ids[-1] if t.turn_ids else 0  # padding keeps turn_ids non-decreasing
        turn_rewards[i, : len(t.turn_rewards)] = torch.tensor(t.turn_rewards)
    truncated = torch.tensor([t.truncated for t in trajectories], dtype=torch.bool)
    group_ids = torch.arange(n // group_size).repeat_interleave(group_size)
    tree = turn_prefix_tree([t.path for t in trajectories], length) if branched else None
    structure = completion_structure(
        request, policy.segments, truncated, completion_ids, actions, group_ids, sampling_tree=tree
    )
    extra = {"turn_ids": turn_ids, "turn_rewards": turn_rewards}
    extra["tool_calls"] = torch.tensor([t.tool_calls for t in trajectories], dtype=torch.long)
    if "turn_roles" in request.structure:
        extra["turn_roles"] = _turn_roles(policy, trajectories, turn_rewards.shape[1], counts)
    structure |= {name: value for name, value in extra.items() if name in request.structure}
    info = {"turns_per_trajectory": counts["turns"] / max(1, n)}
    counts = {**counts, "completion_tokens": int(actions.sum())}
    device = policy.device
    return Rollout(
        rows=[{**t.row, ENVIRONMENT_REWARD_COLUMN: t.reward} for t in trajectories],
        outputs=[policy.tokenizer.decode(t.ids, skip_special_tokens=True) for t in trajectories],
        group_ids=group_ids,
        old_logp=logp.to(device),
        action_mask=actions.to(device),
        structure=structure,
        per_sample={
            "prompt_ids": prompt_ids.to(device),
            "prompt_mask": prompt_mask.to(device),
            "completion_ids": completion_ids.to(device),
            "completion_mask": actions.to(device),
            "completion_attention": attention.to(device),
            **family.per_sample(trajectories, prompt_ids, completion_ids),
        },
        info=info,
        counts={key: int(value) for key, value in sorted(counts.items())},
        left_padded=LEFT_PADDED | family.left_padded,
    )


__all__ = [
    "ENVIRONMENT_REWARD_COLUMN",
    "MULTI_TURN_STRUCTURE",
    "ObservationError",
    "ObservationTokens",
    "SampledTurn",
    "TextTurns",
    "Trajectory",
    "TurnFamily",
    "kept_turns",
    "left_padded_contexts",
    "multi_turn_rollout",
    "turn_budgets",
]
