"""Causal language models (any transformers ``AutoModelForCausalLM``) as genalign policies.

Rollout: prompts are rendered (chat template optional), tokenized, checked against ``max_prompt_tokens`` and left-padded;
one engine call samples ``group_size`` completions per prompt and records behaviour log-probs at the sampling temperature.
The completion mask covers every token up to and including the end token (or the token completing a stop string), so an
empty completion has exactly one action: the end token. Score: one backbone pass over ``[prompt | completion]`` and a
chunked head (:mod:`genalign.policies.lm.logprobs`), so ``score`` of a stored rollout is deterministic and does not
depend on the micro-batch split. The sampler's KV-cache arithmetic differs from a full forward by float rounding, so
``rollout_logp_is_exact = False`` and the trainer re-scores once before the update (contract in
:mod:`genalign.policies.base`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

import torch
from torch import Tensor, nn

from genalign.algorithms import kl_penalty
from genalign.assets import model_location
from genalign.engines import ENGINES, RolloutEngine, SamplingParams, StopStringMatcher
from genalign.policies.base import Rollout, ScoreOutput
from genalign.policies.lm.logprobs import TokenScores, VocabTerm, completion_scores
from genalign.policies.lm.lora import add_lora
from genalign.policies.lm.plumbing import SingleModelPlumbing
from genalign.policies.lm.prompts import encode_prompts
from genalign.policies.lm.reference import adapters_disabled, resolve_reference_mode
from genalign.policies.lm.tokenizer import load_tokenizer

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


@dataclass
class LoRAConfig:
    """LoRA adapters through peft; ``rank=0`` trains all weights."""

    rank: int = field(default=0, metadata={"help": "LoRA rank; 0 disables LoRA and trains every weight."})
    alpha: float = field(default=16.0, metadata={"help": "LoRA scaling numerator (scale = alpha / rank)."})
    dropout: float = field(default=0.0, metadata={"help": "Dropout on the LoRA input during training."})
    target_modules: list[str] = field(
        default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj"],
        metadata={"help": "Names of the linear layers that get adapters (peft target_modules)."},
    )


@dataclass
class CausalLMPolicyConfig:
    """A causal LM policy: model, prompt rendering, sampling, scoring, LoRA and reference model."""

    family: Literal["causal_lm"] = field(default="causal_lm", metadata={"help": "Policy family."})
    model: str = field(
        default="builtin:arith-lm", metadata={"help": "Model folder, or 'builtin:<name>' for a bundled model."}
    )
    tokenizer: str | None = field(default=None, metadata={"help": "Tokenizer folder; None uses the model folder."})
    dtype: Literal["float32", "bfloat16", "float16"] = field(default="float32", metadata={"help": "Weight dtype."})
    use_chat_template: bool = field(
        default=False, metadata={"help": "Render prompts with the tokenizer's chat template."}
    )
    system_prompt: str | None = field(default=None, metadata={"help": "System message prepended (chat template only)."})
    max_prompt_tokens: int | None = field(default=512, metadata={"help": "Longest prompt in tokens; None = no limit."})
    on_long_prompt: Literal["error", "truncate_left", "skip"] = field(
        default="error",
        metadata={"help": "What to do with a prompt longer than max_prompt_tokens (skips are counted)."},
    )
    max_new_tokens: int = field(default=256, metadata={"help": "Longest completion in tokens."})
    temperature: float = field(default=1.0, metadata={"help": "Sampling temperature; log-probs are taken at it too."})
    top_p: float = field(default=1.0, metadata={"help": "Nucleus sampling mass in (0, 1]; 1 disables."})
    top_k: int = field(default=0, metadata={"help": "Sample among the k most likely tokens; 0 disables."})
    stop: list[str] = field(default_factory=list, metadata={"help": "Stop strings (cut from the decoded text)."})
    eval_temperature: float = field(default=1.0, metadata={"help": "Sampling temperature for evaluation rollouts."})
    engine: Literal["hf", "static", "vllm"] = field(
        default="static", metadata={"help": "Rollout back-end: hf (generate), static (own KV-cache loop), vllm (GPU)."}
    )
    logprob_chunk_size: int = field(
        default=256, metadata={"help": "Tokens per chunk of the log-prob head (memory ~ 2 x chunk x vocab floats)."}
    )
    gradient_checkpointing: bool = field(default=False, metadata={"help": "Recompute activations in backward."})
    lora: LoRAConfig = field(default_factory=LoRAConfig, metadata={"help": "LoRA adapters."})
    reference: Literal["auto", "lora_disabled", "frozen_copy", "none"] = field(
        default="auto",
        metadata={
            "help": "Reference model for KL: adapters disabled, a frozen copy, or none; auto picks; loaded lazily."
        },
    )
    seed: int = field(default=0, metadata={"help": "Seed of the rollout sampler's random generator."})

    def validate(self) -> None:
        checks: list[tuple[bool, str]] = [
            (self.temperature > 0, f"policy.temperature={self.temperature} must be > 0 (e.g. 1.0)."),
            (self.eval_temperature > 0, f"policy.eval_temperature={self.eval_temperature} must be > 0 (e.g. 1.0)."),
            (0 < self.top_p <= 1, f"policy.top_p={self.top_p} must be in (0, 1]; use 1.0 to disable."),
            (self.top_k >= 0, f"policy.top_k={self.top_k} must be >= 0; use 0 to disable."),
            (self.max_new_tokens >= 1, f"policy.max_new_tokens={self.max_new_tokens} must be >= 1."),
            (
                self.logprob_chunk_size >= 1,
                f"policy.logprob_chunk_size={self.logprob_chunk_size} must be >= 1 (e.g. 256).",
            ),
            (
                self.max_prompt_tokens is None or self.max_prompt_tokens >= 1,
                f"policy.max_prompt_tokens={self.max_prompt_tokens} must be >= 1 or null.",
            ),
            (self.lora.rank >= 0, f"policy.lora.rank={self.lora.rank} must be >= 0 (0 disables LoRA)."),
            (0 <= self.lora.dropout < 1, f"policy.lora.dropout={self.lora.dropout} must be in [0, 1)."),
            (
                self.lora.rank == 0 or bool(self.lora.target_modules),
                "policy.lora.target_modules is empty; name layers.",
            ),
            (all(self.stop), f"policy.stop={self.stop} contains an empty string; remove it."),
            (
                self.system_prompt is None or self.use_chat_template,
                "policy.system_prompt needs policy.use_chat_template=true (plain prompts have no system role).",
            ),
            (
                not (self.reference == "lora_disabled" and self.lora.rank == 0),
                "policy.reference='lora_disabled' needs policy.lora.rank > 0; use 'frozen_copy' or 'auto'.",
            ),
        ]
        for ok, message in checks:
            if not ok:
                raise ValueError(message)


class CausalLMPolicy(SingleModelPlumbing):
    """A ``transformers`` causal LM behind the :class:`~genalign.policies.base.Policy` contract.

    Build it with :func:`build_policy`. ``per_sample`` of its rollouts holds ``prompt_ids`` ``[N, P]`` (left-padded),
    ``prompt_mask`` ``[N, P]``, ``completion_ids`` ``[N, C]``, ``completion_mask`` ``[N, C]`` and ``truncated`` ``[N]``.
    """

    family = "causal_lm"
    rollout_logp_is_exact = False

    def __init__(
        self, config: CausalLMPolicyConfig, model: nn.Module, tokenizer, device: torch.device, model_path: str
    ) -> None:
        self.config = config
        self.model = model  # the peft model when LoRA is on, else the causal LM
        # The *ForCausalLM module; with LoRA, peft's adapter layers are injected inside it, so they apply here too.
        self.causal_lm = model.get_base_model() if hasattr(model, "get_base_model") else model
        self.tokenizer = tokenizer
        self.device = device
        self.model_path = model_path
        self.engine: RolloutEngine = ENGINES.get(config.engine)(model, tokenizer, model_path=model_path)
        self.generator = torch.Generator(device=device).manual_seed(config.seed)
        self.reference_mode = resolve_reference_mode(config.reference, lora_enabled=config.lora.rank > 0)
        self._frozen_reference: nn.Module | None = None
        generation_config = getattr(self.causal_lm, "generation_config", None)
        eos = {tokenizer.eos_token_id, *_as_list(getattr(generation_config, "eos_token_id", None))}
        self.eos_token_ids = tuple(sorted(i for i in eos if i is not None))
        if not self.eos_token_ids:
            raise ValueError(f"tokenizer of {model_path!r} has no eos token; set tokenizer.eos_token before training.")
        self.pad_token_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else self.eos_token_ids[0]
        self.stop_matcher = StopStringMatcher(tokenizer, tuple(config.stop))

    # ---- rollout -------------------------------------------------------------------------------------------------
    def sampling_params(self, mode: Literal["train", "eval"]) -> SamplingParams:
        cfg = self.config
        return SamplingParams(
            max_new_tokens=cfg.max_new_tokens,
            temperature=cfg.temperature if mode == "train" else cfg.eval_temperature,
            top_p=cfg.top_p,
            top_k=cfg.top_k,
            eos_token_ids=self.eos_token_ids,
            pad_token_id=self.pad_token_id,
            stop=tuple(cfg.stop),
        )

    def rollout(
        self, rows: list[dict[str, Any]], group_size: int, *, mode: Literal["train", "eval"] = "train"
    ) -> Rollout:
        """Sample ``group_size`` completions for each row (rows with too-long prompts may be skipped and counted)."""
        if group_size < 1:
            raise ValueError(f"group_size={group_size} must be >= 1.")
        cfg = self.config
        prompts = encode_prompts(
            rows,
            self.tokenizer,
            use_chat_template=cfg.use_chat_template,
            system_prompt=cfg.system_prompt,
            max_prompt_tokens=cfg.max_prompt_tokens,
            on_long_prompt=cfg.on_long_prompt,
            pad_token_id=self.pad_token_id,
        )
        info: dict[str, Any] = {
            "prompts_skipped_too_long": len(prompts.skipped),
            "prompts_truncated": len(prompts.truncated),
        }
        if not prompts.kept:
            empty = torch.zeros(0, 0)
            return Rollout(
                rows=[],
                outputs=[],
                group_ids=torch.zeros(0, dtype=torch.long),
                old_logp=empty,
                action_mask=empty,
                info=info,
            )
        prompt_ids = prompts.ids.repeat_interleave(group_size, dim=0).to(self.device)  # [N, P]
        prompt_mask = prompts.mask.repeat_interleave(group_size, dim=0).to(self.device)  # [N, P]
        with _eval_mode(self.model):
            generation = self.engine.generate(prompt_ids, prompt_mask, self.sampling_params(mode), self.generator)
        lengths = generation.completion_mask.sum(dim=1).long().tolist()  # [N]
        outputs = [
            self.stop_matcher.cut(self.tokenizer.decode(ids[:length].tolist(), skip_special_tokens=True))
            for ids, length in zip(generation.completion_ids, lengths, strict=True)
        ]
        info["completion_tokens"] = int(sum(lengths))
        return Rollout(
            rows=[rows[i] for i in prompts.kept for _ in range(group_size)],
            outputs=outputs,
            group_ids=torch.arange(len(prompts.kept)).repeat_interleave(group_size),
            old_logp=generation.logp,
            action_mask=generation.completion_mask,
            per_sample={
                "prompt_ids": prompt_ids,
                "prompt_mask": prompt_mask,
                "completion_ids": generation.completion_ids,
                "completion_mask": generation.completion_mask,
                "truncated": generation.truncated,
            },
            info=info,
        )

    # ---- score ---------------------------------------------------------------------------------------------------
    def _logprobs(
        self, causal_lm: nn.Module, rollout: Rollout, with_entropy: bool, vocab_term: VocabTerm | None = None
    ) -> TokenScores:
        data = rollout.per_sample
        prompt_ids, prompt_mask = data["prompt_ids"], data["prompt_mask"]
        completion_ids, completion_mask = data["completion_ids"], data["completion_mask"]
        # Drop columns that are padding in every row of this (micro-)batch; positions come from the mask, so the
        # values do not change, only the work.
        first = int(prompt_mask.any(dim=0).long().argmax()) if prompt_mask.numel() else 0
        width = int(completion_mask.any(dim=0).sum())
        scores = completion_scores(
            causal_lm,
            prompt_ids[:, first:],
            prompt_mask[:, first:],
            completion_ids[:, :width],
            completion_mask[:, :width],
            temperature=self.config.temperature,
            chunk_size=self.config.logprob_chunk_size,
            with_entropy=with_entropy,
            vocab_term=vocab_term,
        )
        pad = rollout.num_actions - width
        padded = [nn.functional.pad(x, (0, pad)) if x is not None else None for x in scores]  # [n, T] each
        return TokenScores(*padded)

    def score(
        self,
        rollout: Rollout,
        *,
        entropy: bool = False,
        kl_estimator: str | None = None,
        vocab_term: VocabTerm | None = None,
    ) -> ScoreOutput:
        """Token log-probs ``[n, T]`` at ``policy.temperature`` (with grad when enabled), entropy and KL if asked.

        Training rollouts are sampled at that temperature, so these are the quantities the behaviour log-probs
        estimate. ``vocab_term`` (``fn(logits / T [k, V]) -> [k]``) is evaluated per token inside the chunked head
        pass, with gradient (``ScoreOutput.vocab_term``). Calls go to the ``*ForCausalLM`` module itself, not through
        a ``DistributedDataParallel`` wrapper.
        """
        scores = self._logprobs(self.causal_lm, rollout, with_entropy=entropy, vocab_term=vocab_term)
        kl = None
        if kl_estimator is not None:
            ref_logp = self.reference_logprobs(rollout)
            kl = kl_penalty(scores.logp, ref_logp, kl_estimator) * rollout.action_mask  # [n, T]
        return ScoreOutput(logp=scores.logp, entropy=scores.entropy, kl=kl, vocab_term=scores.vocab_term)

    @torch.no_grad()
    def reference_logprobs(self, rollout: Rollout) -> Tensor:
        """Log-probs ``[n, T]`` under the reference policy (loaded on first use)."""
        if self.reference_mode == "none":
            raise ValueError("a KL term was requested but policy.reference='none'; set it to 'auto' or drop the KL.")
        if self.reference_mode == "lora_disabled":
            with adapters_disabled(self.model):
                return self._logprobs(self.causal_lm, rollout, with_entropy=False)[0]
        if self._frozen_reference is None:
            self._frozen_reference = (
                _load_model(self.model_path, self.config.dtype, self.device).eval().requires_grad_(False)
            )
        return self._logprobs(self._frozen_reference, rollout, with_entropy=False)[0]

    # ---- training plumbing (trainable_parameters, modules_to_train, save, load: SingleModelPlumbing) --------------
    def state_dict_extra(self) -> dict[str, Any]:
        return {"generator": self.generator.get_state()}

    def load_state_dict_extra(self, state: dict[str, Any]) -> None:
        self.generator.set_state(state["generator"])


def _as_list(value: Any) -> list[Any]:
    if value is None:
        return []
    return list(value) if isinstance(value, list | tuple) else [value]


class _eval_mode:
    """Puts ``module`` in eval mode (no dropout while sampling) and restores its previous mode."""

    def __init__(self, module: nn.Module) -> None:
        self.module = module

    def __enter__(self) -> None:
        self.was_training = self.module.training
        self.module.eval()

    def __exit__(self, *exc: object) -> None:
        self.module.train(self.was_training)


def _load_model(path: str, dtype: str, device: torch.device) -> nn.Module:
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(path, dtype=DTYPES[dtype]).to(device)


def build_policy(config: CausalLMPolicyConfig, device: torch.device | str = "cpu") -> CausalLMPolicy:
    """Load the model and tokenizer named by ``config`` and wrap them as a policy."""
    config.validate()
    device = torch.device(device)
    model_path = model_location(config.model)
    tokenizer = load_tokenizer(model_location(config.tokenizer) if config.tokenizer else model_path)
    model = _load_model(model_path, config.dtype, device)
    if config.gradient_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    if config.lora.rank > 0:
        lora = config.lora
        model = add_lora(
            model, rank=lora.rank, alpha=lora.alpha, dropout=lora.dropout, target_modules=lora.target_modules
        )
    return CausalLMPolicy(config, model, tokenizer, device, model_path)


CONFIG_CLASS = CausalLMPolicyConfig

__all__ = ["CONFIG_CLASS", "CausalLMPolicy", "CausalLMPolicyConfig", "LoRAConfig", "build_policy"]
