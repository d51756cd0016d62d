"""Causal language models (any transformers ``AutoModelForCausalLM``) as genalign policies.

Rollout: prompts are rendered (chat template optional), tokenized, checked against ``max_prompt_tokens`` and left-padded;
one engine call samples ``group_size`` completions per prompt and records behaviour log-probs at the sampling temperature.
The completion mask covers every token up to and including the end token (or the token completing a stop string), so an
empty completion has exactly one action: the end token. The rollout's structure carries the truncation flags and, when
asked, the segment ids of the completions (:mod:`genalign.policies.lm.segments`); the completion token ids always
(``structure.action_ids``, so that sample sources can store and replay samples).

Guidance (``row[GUIDANCE_KEY]``, :mod:`genalign.policies.lm.guidance`): a row's ``hint`` and ``prefix`` are rendered
into its prompt ids (conditioning, never actions); rows with a ``self_hint`` first get a short hint sampled by the
policy itself ([69] SAGE), which then renders like ``hint`` (``Rollout.rows`` carry the sampled hint, so the prompt
renders again identically); rows are sampled in one engine call per sampling ``temperature``.

Force (:meth:`CausalLMPolicy.force`, :mod:`genalign.policies.lm.forced`): a training rollout of given completions
(replayed token ids, or reference-solution texts closed with the end token), or of given starts continued by the
rollout engine, laid out like a sampled one.

Multi-turn (``policy.multi_turn``, :mod:`genalign.policies.lm.multi_turn`): with environments configured, ``rollout``
dispatches to the turn loop, whose rollouts carry the environment's tokens as attended context between the model's
turns (``per_sample["completion_attention"]``); with the static engine each trajectory's KV cache is kept between its
turns (``turn_engine``, ``multi_turn.keep_kv_cache``); without environments nothing here changes.

Teachers (``algorithm.teacher``, :mod:`genalign.teachers`): every kind; a teacher model is loaded like the frozen
reference (:meth:`CausalLMPolicy.load_peer`) and a teacher with privileged context sees the prompts re-rendered with it
(:meth:`CausalLMPolicy.with_prompts`); multi-turn rollouts host model and self teachers only (:data:`MULTI_TURN_TEACHERS`).

Score: one backbone pass over ``[prompt | completion]`` and a chunked head (:mod:`genalign.policies.lm.logprobs`), so
``score`` of a stored rollout is deterministic and does not depend on the micro-batch split; entropy, vocabulary terms,
top-k log-probs and hidden states come from the same pass, the KL from the reference policy of the token-LM core
(:mod:`genalign.policies.lm.core`). The sampler's KV-cache arithmetic differs from a full forward by float rounding,
so the family declares ``rollout_logp_is_exact = False`` and the trainer re-scores once before the update (contract in
:mod:`genalign.policies.base`).

Routing Replay (``policy.routing_replay``, mixture-of-experts models, [294]; :mod:`genalign.policies.lm.routing_replay`):
right after sampling, one no-grad scoring pass records every token's experts (``per_sample["prompt_routes"]``,
``["completion_routes"]``), and every later scoring pass of the rollout routes the tokens to them.
"""

from __future__ import annotations

import contextlib
import warnings
from collections import deque
from dataclasses import replace
from typing import Any, Literal

import torch
from torch import Tensor, nn

from genalign.algorithms.structure import PrefixTree
from genalign.assets import model_location
from genalign.policies.base import PeerModel, Rollout, RolloutRequest, ScoreOutput, ScoreRequest
from genalign.policies.lm.chat_turns import ChatRenderer
from genalign.policies.lm.config import CONFIG_CLASS, MULTI_TURN_TEACHERS, CausalLMPolicyConfig
from genalign.policies.lm.core import (
    DTYPES,
    LoRAConfig,
    TokenLMPolicy,
    attention_kwargs,
    completion_structure,
    empty_rollout,
    end_and_pad_token_ids,
    eval_mode,
    lora_reference_mode,
    peer_model,
    sampling_params,
)
from genalign.policies.lm.engines import ENGINES, Generation, RolloutEngine, SamplingParams, StopStringMatcher
from genalign.policies.lm.engines.tree import TreeCacheEngine
from genalign.policies.lm.engines.turn_cache import TurnCacheEngine, turn_cache_unsupported_reason
from genalign.policies.lm.export import CheckpointFacts, sampling_generation_config
from genalign.policies.lm.forced import LEFT_PADDED, ended, forced_rollout, sample_after, with_action_ids
from genalign.policies.lm.guidance import (
    completion_texts,
    conditioning_only,
    merge_generations,
    merge_trees,
    read_guidance,
    sample_self_hints,
    split_by,
)
from genalign.policies.lm.logprobs import REFERENCE_TERMS, OtherModel, TokenScores, completion_scores, output_head
from genalign.policies.lm.lora import add_lora
from genalign.policies.lm.multi_turn import TextTurns, multi_turn_rollout
from genalign.policies.lm.probes import probe_structure
from genalign.policies.lm.prompts import EncodedPrompts, encode_prompts
from genalign.policies.lm.reference import ReferencePolicy
from genalign.policies.lm.routing_replay import recording, replaying, routes_unsupported_reason
from genalign.policies.lm.segments import SegmentBoundaries
from genalign.policies.lm.shared_prefix import shared_prefix_hidden_states
from genalign.policies.lm.tokenizer import load_tokenizer
from genalign.policies.lm.trained_actions import restrict_to_trained
from genalign.policies.lm.trees import sample_tree_group


class CausalLMPolicy(TokenLMPolicy):
    """A ``transformers`` causal LM behind the :class:`~genalign.policies.base.Policy` contract.

    Build it with :func:`build_policy`. ``per_sample`` of its rollouts holds ``prompt_ids`` ``[N, P]`` (left-padded),
    ``prompt_mask`` ``[N, P]``, ``completion_ids`` ``[N, C]`` and ``completion_mask`` ``[N, C]`` (and, for multi-turn
    rollouts, ``completion_attention`` ``[N, C]``; with Routing Replay, ``prompt_routes`` ``[N, P, layers, k]`` and
    ``completion_routes`` ``[N, C, layers, k]``); the truncation flags (and segment ids) are in ``Rollout.structure``.
    """

    family = "causal_lm"

    def __init__(
        self, config: CausalLMPolicyConfig, model: nn.Module, tokenizer, device: torch.device, model_path: str
    ) -> None:
        mode = lora_reference_mode(config.lora, config.reference)
        super().__init__(
            config,
            model,
            preprocessor=tokenizer,
            device=device,
            reference=ReferencePolicy(mode, model, lambda: _load_model(config, model_path, device)),
            generator=torch.Generator(device=device).manual_seed(config.seed),
        )
        self.tokenizer = tokenizer
        self.model_path = model_path
        self.engine: RolloutEngine = ENGINES.get(config.engine)(
            model, tokenizer, model_path=model_path, vllm=config.vllm
        )
        self.eos_token_ids, self.pad_token_id = end_and_pad_token_ids(
            tokenizer, self.hf_model.generation_config, model_name=model_path
        )
        self.stop_matcher = StopStringMatcher(tokenizer, tuple(config.stop))
        self.tree_engine = TreeCacheEngine(model, tokenizer) if config.tree.enabled else None
        keep_turn_caches = config.multi_turn.enabled and config.multi_turn.keep_kv_cache and config.engine == "static"
        if keep_turn_caches and (reason := turn_cache_unsupported_reason(model)) is not None:
            warnings.warn(f"policy.multi_turn.keep_kv_cache: {reason}; every turn re-encodes its conversation instead "
                          "(same distribution). Set it to false to silence this warning.", stacklevel=2)  # fmt: skip
            keep_turn_caches = False
        #: samples the turns of multi-turn rollouts with each trajectory's KV cache kept between its turns, or None
        self.turn_engine = TurnCacheEngine(model, tokenizer) if keep_turn_caches else None
        self.segments = SegmentBoundaries(tokenizer, config.probes.step_markers)
        if config.routing_replay and (reason := routes_unsupported_reason(model)) is not None:
            raise ValueError(f"policy.routing_replay=true needs a mixture-of-experts model: {reason}; set it to false.")
        if config.multi_turn.enabled:
            self.environments = config.multi_turn.environment_set()
            #: the role judge of each model turn (``turn_roles``), built once
            self.segment_judge = config.multi_turn.judge()
            self.chat_renderer = ChatRenderer(tokenizer, config.system_prompt)
            self.chat_renderer.check()
            #: the last failures of environment code (counted in rollout info), for inspection
            self.environment_failures: deque[str] = deque(maxlen=32)

    # ---- rollout -------------------------------------------------------------------------------------------------
    def sampling_params(self, mode: Literal["train", "eval"]) -> SamplingParams:
        return sampling_params(self.config, mode, eos_token_ids=self.eos_token_ids, pad_token_id=self.pad_token_id)

    # ---- checkpoint extras (weights, tokenizer and state: TokenLMPolicy) ------------------------------------------
    def generation_config(self) -> Any:
        return sampling_generation_config(
            self.hf_model.generation_config,
            eos_token_ids=self.eos_token_ids,
            pad_token_id=self.pad_token_id,
            max_new_tokens=self.config.max_new_tokens,
        )

    def checkpoint_facts(self) -> CheckpointFacts:
        return CheckpointFacts(
            self.family, self.config.model, self.model_path, "AutoModelForCausalLM", lora=self.config.lora
        )

    def rollout(
        self,
        rows: list[dict[str, Any]],
        group_size: int,
        *,
        mode: Literal["train", "eval"] = "train",
        request: RolloutRequest = RolloutRequest(),
    ) -> Rollout:
        """Sample ``group_size`` completions for each row (rows with too-long prompts may be skipped and counted),
        honouring the rows' guidance (module docstring)."""
        if group_size < 1:
            raise ValueError(f"group_size={group_size} must be >= 1.")
        if self.config.multi_turn.enabled:
            return multi_turn_rollout(self, rows, group_size, mode, request, TextTurns(self))
        counts: dict[str, int] = {}
        guidance = [read_guidance(row, index) for index, row in enumerate(rows)]
        if any(g.self_hint is not None for g in guidance):
            with eval_mode(self.model):
                rows = sample_self_hints(self, rows, self.sampling_params(mode), counts)
        prompts = self.encode(rows)
        counts |= {"prompts_skipped_too_long": len(prompts.skipped), "prompts_truncated": len(prompts.truncated)}
        if not prompts.kept:
            return empty_rollout(counts)
        prompt_ids = prompts.ids.repeat_interleave(group_size, dim=0).to(self.device)  # [N, P]
        prompt_mask = prompts.mask.repeat_interleave(group_size, dim=0).to(self.device)  # [N, P]
        default = self.sampling_params(mode).temperature
        temperatures = [guidance[i].temperature or default for i in prompts.kept]
        with eval_mode(self.model):
            generation, sampling_tree = self._generate_by_temperature(prompts, group_size, mode, counts, temperatures)
        lengths = generation.completion_mask.sum(dim=1).long().tolist()  # [N]
        prefixes = [prefix for prefix in prompts.prefixes for _ in range(group_size)]
        outputs = completion_texts(self.tokenizer, self.stop_matcher, prefixes, generation.completion_ids, lengths)
        counts["completion_tokens"] = int(sum(lengths))
        rollout = Rollout(
            rows=[rows[i] for i in prompts.kept for _ in range(group_size)],
            outputs=outputs,
            group_ids=torch.arange(len(prompts.kept)).repeat_interleave(group_size),
            old_logp=generation.logp,
            action_mask=generation.completion_mask,
            structure=completion_structure(
                with_action_ids(request),
                self.segments,
                generation.truncated,
                generation.completion_ids,
                generation.completion_mask,
                group_ids=torch.arange(len(prompts.kept)).repeat_interleave(group_size),
                sampling_tree=sampling_tree,
            ),
            per_sample={
                "prompt_ids": prompt_ids,
                "prompt_mask": prompt_mask,
                "completion_ids": generation.completion_ids,
                "completion_mask": generation.completion_mask,
            },
            counts=counts,
            left_padded=LEFT_PADDED,
        )
        return probe_structure(self, self._with_routes(rollout), request)

    def force(
        self,
        rows: list[dict[str, Any]],
        completions: list[Tensor | str],
        behaviour_logp: list[Tensor | None],
        *,
        request: RolloutRequest = RolloutRequest(),
        continues: list[bool] | None = None,
    ) -> Rollout:
        """A training rollout of given completions (token ids, or texts closed with the end token) for ``rows``,
        laid out like :meth:`rollout`'s; ``old_logp`` is ``behaviour_logp[i]`` or, where None or NaN, the current
        policy's log-probs through the scoring pass; starts flagged in ``continues`` are continued by the rollout
        engine (:mod:`genalign.policies.lm.forced`)."""
        rollout = forced_rollout(self, rows, completions, behaviour_logp, request, continues)
        return probe_structure(self, self._with_routes(rollout), request)

    def _with_routes(self, rollout: Rollout) -> Rollout:
        """``rollout`` with the experts of every token of ``[prompt | completion]`` from one no-grad scoring pass of
        the current weights over all columns, ``prompt_routes`` ``[N, P, layers, k]`` and ``completion_routes``
        ``[N, C, layers, k]`` (``policy.routing_replay``, :mod:`genalign.policies.lm.routing_replay`); unchanged
        otherwise."""
        if not self.config.routing_replay or not len(rollout):
            return rollout
        data = rollout.per_sample
        prompt_width, completion_width = data["prompt_ids"].shape[1], data["completion_ids"].shape[1]
        with torch.no_grad(), eval_mode(self.model), recording(self.model, len(rollout)) as passes:
            self._completion_scores(self.model, data, 0, completion_width, ScoreRequest())
        prompt_routes, completion_routes = passes[0].split([prompt_width, completion_width], dim=1)
        per_sample = {**data, "prompt_routes": prompt_routes, "completion_routes": completion_routes}
        return replace(rollout, per_sample=per_sample, left_padded=rollout.left_padded | {"prompt_routes"})

    def encode(self, rows: list[dict[str, Any]], *, limit: bool = True) -> EncodedPrompts:
        """``rows``' prompts rendered (chat template, guidance hint and prefix), tokenized and left-padded; ``limit``
        applies ``policy.max_prompt_tokens`` (the self-hint instruction prompts go without it)."""
        cfg = self.config
        return encode_prompts(
            rows,
            self.tokenizer,
            use_chat_template=cfg.use_chat_template,
            system_prompt=cfg.system_prompt,
            max_prompt_tokens=cfg.max_prompt_tokens if limit else None,
            on_long_prompt=cfg.on_long_prompt,
            pad_token_id=self.pad_token_id,
        )

    # ---- teachers (TeacherHost; the rest is TokenLMPolicy's) -------------------------------------------------------
    def load_peer(self, path: str, *, tokenizer: str | None, dtype: str | None, field: str) -> PeerModel:
        """The causal LM saved at ``path`` (and its tokenizer), loaded with this policy's options (``dtype`` aside)."""
        location = model_location(path, field=field)
        peer_tokenizer = load_tokenizer(
            model_location(tokenizer, field=f"{field.rsplit('.', 1)[0]}.tokenizer", marker=None) if tokenizer
            else location
        )  # fmt: skip
        config = replace(self.config, dtype=dtype or self.config.dtype)
        return peer_model(_load_model(config, location, self.device), peer_tokenizer)

    def with_prompts(self, rollout: Rollout, rows: list[dict[str, Any]]) -> Rollout:
        """``rollout`` with each sample's prompt ids rendered from ``rows`` (chat template and guidance as the policy
        renders them, never truncated); completions unchanged."""
        encoded = self.encode(rows, limit=False)
        device = rollout.per_sample["prompt_ids"].device
        per_sample = {
            **rollout.per_sample,
            "prompt_ids": encoded.ids.to(device),
            "prompt_mask": encoded.mask.to(device),
        }
        return replace(rollout, per_sample=per_sample)

    def write_with(
        self, module: nn.Module, rows: list[dict[str, Any]], starts: list[list[int]], caps: list[int | None]
    ) -> list[tuple[list[int], Tensor]]:
        """:meth:`TeacherHost.write_with`: one call of a rollout engine of ``module`` (``static`` when the policy
        samples with it, else ``hf``) after ``[prompt | start]`` for every start with room left."""
        limit = self.config.max_new_tokens
        room = [0 if ended(self, start) else min(cap or limit, limit - len(start)) for start, cap in
                zip(starts, caps, strict=True)]  # fmt: skip
        written: list[tuple[list[int], Tensor]] = [([], torch.zeros(0)) for _ in rows]
        chosen = [i for i, r in enumerate(room) if r > 0]
        if not chosen:
            return written
        prompts = self.encode([conditioning_only(rows[i]) for i in chosen], limit=False)
        contexts = [prompts.ids[k][prompts.mask[k] > 0].tolist() + starts[i] for k, i in enumerate(chosen)]
        engine = ENGINES.get("static" if self.config.engine == "static" else "hf")(
            module, self.tokenizer, model_path=self.model_path
        )
        for i, result in zip(chosen, sample_after(self, engine, module, contexts, [room[i] for i in chosen]),
                             strict=True):  # fmt: skip
            written[i] = result
        return written

    def head_logits(self, module: nn.Module, hidden: torch.Tensor) -> torch.Tensor:
        """``[k, V]`` float32 logits of ``module``'s output head (soft-capped like its scoring pass) for ``hidden``
        ``[k, H]``, divided by ``policy.temperature``; a sharded head is refused (its rows live on other processes)."""
        head = output_head(module)
        weight = getattr(head, "weight", None)
        if weight is not None and type(weight).__name__ == "DTensor":
            raise ValueError(
                "the full-distribution teacher pass (teacher_vocab_reverse_kl / teacher_vocab_forward_kl, "
                "algorithm.teacher.distribution.extrapolation) reads the output head outside the model's sharded "
                "forward; it does not run under sharded training: use one process or drop those options."
            )
        return head(hidden).float() / self.config.temperature

    def _generate_by_temperature(
        self,
        prompts: EncodedPrompts,
        group_size: int,
        mode: Literal["train", "eval"],
        counts: dict[str, int],
        temperatures: list[float],
    ) -> tuple[Generation, PrefixTree | None]:
        """:meth:`_generate` once per distinct sampling temperature of the kept rows, merged in row order."""
        groups = split_by(temperatures)
        params = self.sampling_params(mode)
        if len(groups) == 1:
            return self._generate(
                prompts.ids, prompts.mask, group_size, mode, counts, replace(params, temperature=temperatures[0])
            )
        generations, trees = [], []
        for temperature, members in groups:
            chosen = torch.tensor(members)
            generation, tree = self._generate(
                prompts.ids[chosen],
                prompts.mask[chosen],
                group_size,
                mode,
                counts,
                replace(params, temperature=temperature),
            )
            generations.append((members, generation))
            trees.append((members, tree))
        merged_tree = merge_trees(trees, group_size) if trees[0][1] is not None else None
        return merge_generations(generations, group_size, self.pad_token_id), merged_tree

    def _generate(
        self,
        prompt_ids: Tensor,
        prompt_mask: Tensor,
        group_size: int,
        mode: Literal["train", "eval"],
        counts: dict[str, int],
        params: SamplingParams,
    ) -> tuple[Generation, PrefixTree | None]:
        """``group_size`` completions of each prompt ``[B, P]`` with ``params``: independent samples, or with
        ``policy.tree`` in training the leaves of shared-prefix trees and their sampling tree; adds the sampled
        tokens to ``counts``."""
        prompt_ids, prompt_mask = prompt_ids.to(self.device), prompt_mask.to(self.device)
        counts.setdefault("generated_tokens", 0)
        if self.tree_engine is None or mode == "eval":
            generation = self.engine.generate(
                prompt_ids.repeat_interleave(group_size, dim=0),
                prompt_mask.repeat_interleave(group_size, dim=0),
                params,
                self.generator,
            )
            counts["generated_tokens"] += int(generation.completion_mask.sum())
            return generation, None
        tree = sample_tree_group(
            self.tree_engine,
            self.config.tree,
            prompt_ids,
            prompt_mask,
            group_size=group_size,
            params=params,
            generator=self.generator,
            boundary_table=self.segments.table() if self.config.tree.at_segment_boundaries else None,
        )
        counts["generated_tokens"] += tree.generated_tokens
        return tree.generation, tree.prefix_tree

    # ---- score ---------------------------------------------------------------------------------------------------
    def score_actions(self, module: nn.Module, rollout: Rollout, request: ScoreRequest) -> ScoreOutput:
        """Token log-probs ``[n, T]`` at ``policy.temperature`` under ``module`` (with grad when enabled) and the
        requested token features, all from one backbone pass and the chunked head.

        Training rollouts are sampled at that temperature, so these are the quantities the behaviour log-probs
        estimate. ``request.vocab_term`` (``fn(logits / T [k, V]) -> [k]``) is evaluated per token inside the chunked
        head pass, with gradient. ``module`` itself is called (the peft wrapper with LoRA), so hooks of sharded
        training on it run.
        """
        data = rollout.per_sample
        prompt_mask = data["prompt_mask"]
        attention = data.get("completion_attention")  # multi-turn: environment tokens are attended, not scored
        # Drop columns that are padding in every row of this (micro-)batch; positions come from the mask, so the
        # values do not change, only the work. Multi-turn rollouts keep their full width: their long sequences make
        # the float rounding of attention depend on the key length, and scores must not depend on the split.
        first = int(prompt_mask.any(dim=0).long().argmax()) if prompt_mask.numel() and attention is None else 0
        width = _kept_completion_width(data)
        replay = contextlib.nullcontext()
        if "prompt_routes" in data:  # Routing Replay: the experts recorded for these columns
            routes = torch.cat([data["prompt_routes"][:, first:], data["completion_routes"][:, :width]], dim=1)
            replay = replaying(module, routes)
        with replay:
            scores = self._completion_scores(module, data, first, width, request)
        pad = lambda x: _pad_actions(x, rollout.num_actions) if x is not None else None  # noqa: E731
        features = {
            "entropy": scores.entropy,
            "vocab_term": scores.vocab_term,
            "topk_logp": scores.topk_logp,
            "hidden": scores.hidden,
            "logit_stats": scores.logit_stats,
            "ref_forward_kl": scores.ref_forward_kl,
            "ref_vocab_term": scores.ref_vocab_term,
        }
        return ScoreOutput(pad(scores.logp), {name: pad(value) for name, value in features.items()})

    def restrict_to_trained(self, rollout: Rollout, trained: Tensor) -> Rollout:
        """:func:`~genalign.policies.lm.trained_actions.restrict_to_trained`: the completions cut after their last
        trained token, the head run on the trained tokens only."""
        return restrict_to_trained(rollout, trained)

    def _completion_scores(
        self, module: nn.Module, data: dict[str, Any], first: int, width: int, request: ScoreRequest
    ) -> TokenScores:
        """:func:`completion_scores` of prompt columns ``first:`` and completion columns ``:width``."""
        prompt_ids, prompt_mask = data["prompt_ids"], data["prompt_mask"]
        completion_ids, completion_mask = data["completion_ids"], data["completion_mask"]
        attention = data.get("completion_attention")
        return completion_scores(
            module,
            prompt_ids[:, first:],
            prompt_mask[:, first:],
            completion_ids[:, :width],
            completion_mask[:, :width],
            completion_attention=attention[:, :width] if attention is not None else None,
            temperature=self.config.temperature,
            chunk_size=self.config.logprob_chunk_size,
            with_entropy="entropy" in request,
            vocab_term=request.param("vocab_term") if "vocab_term" in request else None,
            topk=request.param("topk_logp", 0) if "topk_logp" in request else 0,
            with_hidden="hidden" in request,
            with_logit_stats="logit_stats" in request,
            hidden_states=shared_prefix_hidden_states if self.config.shared_prefix_scoring else None,
            reference=_kept_reference(request, width),
        )


def _kept_reference(request: ScoreRequest, width: int) -> OtherModel | None:
    """The reference's side (:class:`~genalign.policies.lm.logprobs.OtherModel`, set by :meth:`TokenLMPolicy.score`
    from its reference pass for ``ref_forward_kl`` / ``ref_vocab_term``), its hidden states cut to the kept
    completion columns; None when not asked."""
    side = next((request.param(name) for name in REFERENCE_TERMS if name in request), None)
    return side._replace(hidden=side.hidden[:, :width]) if side is not None else None


def _kept_completion_width(data: dict[str, Any]) -> int:
    """The completion columns a scoring pass keeps: those real in some row (all of them in a multi-turn rollout)."""
    if data.get("completion_attention") is not None:
        return data["completion_ids"].shape[1]
    return int(data["completion_mask"].any(dim=0).sum())


def _pad_actions(x: Tensor, num_actions: int) -> Tensor:
    """Zero-pad ``x`` ``[n, C, ...]`` along the action axis to ``[n, num_actions, ...]``."""
    return nn.functional.pad(x, (0, 0) * (x.dim() - 2) + (0, num_actions - x.shape[1]))


def _load_model(config: CausalLMPolicyConfig, path: str, device: torch.device) -> nn.Module:
    from transformers import AutoModelForCausalLM

    kwargs = attention_kwargs(config.attn_implementation)
    return AutoModelForCausalLM.from_pretrained(path, dtype=DTYPES[config.dtype], **kwargs).to(device)


def build_policy(config: CausalLMPolicyConfig, device: torch.device | str = "cpu") -> CausalLMPolicy:
    """Load the model and tokenizer named by ``config`` and wrap them as a policy."""
    config.validate()
    device = torch.device(device)
    model_path = model_location(config.model)
    tokenizer = load_tokenizer(
        model_location(config.tokenizer, field="policy.tokenizer", marker=None) if config.tokenizer else model_path
    )
    if config.chat_template is not None:
        tokenizer.chat_template = config.chat_template
    model = _load_model(config, model_path, device)
    if config.gradient_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    if config.lora.rank > 0:
        model = add_lora(model, config.lora)
    return CausalLMPolicy(config, model, tokenizer, device, model_path)


__all__ = [
    "CONFIG_CLASS",
    "MULTI_TURN_TEACHERS",
    "CausalLMPolicy",
    "CausalLMPolicyConfig",
    "LoRAConfig",
    "build_policy",
]
