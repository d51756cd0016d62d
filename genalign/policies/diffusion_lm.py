"""Masked diffusion language models (LLaDA, Dream, DiffuCoder, any bidirectional transformers model) as policies.

Rollout: prompts are tokenized and left-padded (:mod:`genalign.policies.lm.prompts`), answers are sampled by block
unmasking (:func:`genalign.schedulers.masked_diffusion.generate`), and each sample gets a *mask seed*. Score: the
configured likelihood proxy (:data:`genalign.likelihood.LIKELIHOOD_PROXIES`) estimates the log-likelihood of the
stored answer, drawing its masks from the sample's seed, so the estimate of one sample never depends on the
micro-batch it sits in.

Mask seeds and the on-policy ratio: the rollout's ``old_logp`` is computed right after sampling by the very code path
of :meth:`DiffusionLMPolicy.score`, with the seeds of inner epoch 0. The lifecycle stage ``on_inner_epoch(k)`` (the
trainer calls it before each pass over a rollout batch) selects the seeds of epoch ``k``: with ``mask_seeds="per_inner_epoch"``
(d1's fresh mask per inner iteration) they are re-drawn deterministically from the stored seed and ``k``; with
``"per_rollout"`` every epoch reuses the rollout's masks. Either way the first update shares the rollout's seeds, so
its ratio is exactly 1 for every proxy. Float results of a forward pass can depend on the batch composition, so the
family declares ``rollout_logp_is_exact = False``: the trainer re-scores once before the update with its own
micro-batching (same seeds, so the same masks).

Capabilities: the KL to the reference (unless ``reference='none'``), estimated by the same proxy with the same seeds;
no entropy, vocabulary term, top-k or hidden states (the actions are likelihood-proxy terms, not next-token choices),
and no rollout structure (every answer has ``gen_length`` tokens, so nothing is truncated). Reference, checkpoints and
resumable state (the sampler's and the mask seeds' generators) come from the token-LM core
(:mod:`genalign.policies.lm.core`).

Model access: ``model_fn(input_ids [B, L], attention_mask [B, L] | None) -> logits [B, L, V]`` aligned with the
input; Dream-style models, whose logits at ``j`` predict token ``j + 1``, are re-aligned with ``shifted_logits``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import torch
from torch import Tensor, nn

from genalign.algorithms._validation import check_hyperparameters
from genalign.assets import model_location
from genalign.likelihood import LIKELIHOOD_PROXIES, ProxyOutput
from genalign.policies.base import PolicyCapabilities, Rollout, RolloutRequest, ScoreOutput, ScoreRequest
from genalign.policies.lm.core import (
    DTYPES,
    AttnImplementation,
    LoRAConfig,
    TokenLMPolicy,
    attention_kwargs,
    empty_rollout,
    eval_mode,
    lora_reference_mode,
    token_capabilities,
)
from genalign.policies.lm.export import CheckpointFacts
from genalign.policies.lm.lora import add_lora
from genalign.policies.lm.prompts import encode_prompts
from genalign.policies.lm.reference import ReferencePolicy
from genalign.policies.lm.tokenizer import load_tokenizer
from genalign.schedulers.masked_diffusion import check_generation_args, completion_mask_through_first_eos, generate

_SEED_MIX = 6364136223846793005  # odd 63-bit multiplier (Knuth's LCG): epoch k's seed = base + k · mix (mod 2^63 - 1)


@dataclass
class DiffusionLMPolicyConfig:
    """A masked diffusion LM, its sampler and its likelihood proxy."""

    family: Literal["diffusion_lm"] = field(default="diffusion_lm", metadata={"help": "Policy family."})
    model: str = field(
        default="builtin:arith-dlm",
        metadata={"help": "Local model folder or 'builtin:<name>' (never downloaded)."},
    )
    tokenizer: str | None = field(default=None, metadata={"help": "Tokenizer folder; None uses the model folder."})
    architecture: Literal["masked_lm", "remote_code", "bidirectional_causal_lm"] = field(
        default="masked_lm",
        metadata={
            "help": "How to load the model: 'masked_lm' (AutoModelForMaskedLM: BERT, ModernBERT, the demo), "
            "'remote_code' (LLaDA / Dream checkpoints with their own code, trust_remote_code, local folder only), "
            "'bidirectional_causal_lm' (a Llama/Qwen body given a full, non-causal attention mask)."
        },
    )
    shifted_logits: bool = field(
        default=False,
        metadata={"help": "Logits at position j predict token j+1 (Dream, DiffuCoder); False for LLaDA and BERT."},
    )
    mask_token_id: int | None = field(
        default=None, metadata={"help": "Mask token id; None takes tokenizer.mask_token_id (LLaDA: 126336)."}
    )
    dtype: Literal["float32", "bfloat16", "float16"] = field(default="float32", metadata={"help": "Weight dtype."})
    attn_implementation: AttnImplementation | None = field(
        default=None,
        metadata={
            "help": "Attention kernel passed to transformers; null keeps transformers' choice (sdpa if supported)."
        },
    )
    use_chat_template: bool = field(default=False, metadata={"help": "Render prompts with the chat template."})
    system_prompt: str | None = field(default=None, metadata={"help": "System message (chat template only)."})
    max_prompt_tokens: int | None = field(default=512, metadata={"help": "Longest prompt in tokens; None = no limit."})
    on_long_prompt: Literal["error", "truncate_left", "skip"] = field(
        default="error", metadata={"help": "What to do with a prompt longer than max_prompt_tokens."}
    )
    gen_length: int = field(default=4, metadata={"help": "Answer length in tokens (LLaDA recipes: 256)."})
    block_length: int = field(
        default=4, metadata={"help": "Tokens per block, decoded left to right; divides gen_length."}
    )
    steps: int = field(default=4, metadata={"help": "Denoising steps in all; divisible by gen_length / block_length."})
    temperature: float = field(default=1.0, metadata={"help": "Gumbel-max temperature of training rollouts."})
    eval_temperature: float = field(default=0.0, metadata={"help": "Temperature of evaluation rollouts (0 = greedy)."})
    remasking: Literal["low_confidence", "random", "threshold"] = field(
        default="low_confidence", metadata={"help": "Which drawn tokens are committed at each step."}
    )
    confidence_threshold: float = field(
        default=0.9, metadata={"help": "For remasking='threshold': commit every token above this confidence."}
    )
    likelihood_proxy: str = field(
        default="one_step",
        metadata={
            "help": "Name in LIKELIHOOD_PROXIES: one_step (d1), mc_elbo, coupled (coupled-GRPO/ESPO), spg, trace, "
            "gdpo_quadrature (GDPO [36]), left_to_right (JustGRPO [35])."
        },
    )
    proxy_args: dict[str, Any] = field(
        default_factory=dict,
        metadata={"help": "Keyword hyper-parameters of the proxy, e.g. {num_samples: 2, level: sequence}."},
    )
    mask_seeds: Literal["per_inner_epoch", "per_rollout"] = field(
        default="per_inner_epoch",
        metadata={"help": "Re-draw the proxy's masks for every inner epoch (d1) or keep the rollout's masks."},
    )
    action_mask: Literal["through_first_eos", "all"] = field(
        default="through_first_eos",
        metadata={"help": "Trained answer tokens: up to and including the first EOS, or all gen_length tokens."},
    )
    lora: LoRAConfig = field(default_factory=LoRAConfig, metadata={"help": "LoRA adapters."})
    reference: Literal["auto", "lora_disabled", "frozen_copy", "none"] = field(
        default="auto",
        metadata={"help": "Reference policy for KL: base weights under disabled LoRA, a frozen copy, or none."},
    )
    seed: int = field(default=0, metadata={"help": "Seed of the sampler and of the mask seeds."})

    def validate(self) -> None:
        check_hyperparameters(LIKELIHOOD_PROXIES, self.likelihood_proxy, self.proxy_args)  # unknown name or keyword
        reserved = {"mask_id", "seeds", "prompt_attention_mask", "decode_step"} & set(self.proxy_args)
        if reserved:
            raise ValueError(
                f"policy.proxy_args sets {sorted(reserved)}, which the policy supplies itself; remove them."
            )
        check_generation_args(gen_length=self.gen_length, block_length=self.block_length, steps=self.steps, mask_id=0)
        checks: list[tuple[bool, str]] = [
            (self.temperature >= 0, f"policy.temperature={self.temperature} must be >= 0 (0 is greedy)."),
            (self.eval_temperature >= 0, f"policy.eval_temperature={self.eval_temperature} must be >= 0."),
            (
                0 < self.confidence_threshold <= 1,
                f"policy.confidence_threshold={self.confidence_threshold} must be in (0, 1] (e.g. 0.9).",
            ),
        ]
        for ok, message in checks:
            if not ok:
                raise ValueError(message)
        lora_reference_mode(self.lora, self.reference)  # the LoRA options, and the reference they allow

    def capabilities(self) -> PolicyCapabilities:
        """The KL unless ``reference='none'``; no token features and no rollout structure (module docstring)."""
        return token_capabilities(self.reference, features=frozenset(), structure=frozenset())


class DiffusionLMPolicy(TokenLMPolicy):
    """A masked diffusion LM behind the :class:`~genalign.policies.base.Policy` contract.

    ``per_sample`` of its rollouts: ``prompt_ids`` / ``prompt_mask`` ``[N, P]`` (left-padded), ``completion_ids``
    ``[N, T]``, ``completion_mask`` ``[N, T]`` (the trained answer tokens), ``decode_step`` ``[N, T]`` (the step that
    committed each token) and ``mask_seed`` ``[N]`` (long). The action axis is the proxy's: ``T`` tokens, or 1
    (2 for ``spg``) per sequence.
    """

    family = "diffusion_lm"
    missing_feature_reasons = {
        **TokenLMPolicy.missing_feature_reasons,
        "entropy": "has no per-action entropy (its actions are likelihood-proxy terms); set the entropy coefficient to 0",
        "vocab_term": "has no next-token logits per action (its actions are likelihood-proxy terms)",
        "topk": "has no next-token distribution per action (its actions are likelihood-proxy terms)",
        "hidden": "has no hidden state per action (its actions are likelihood-proxy terms)",
    }

    def __init__(
        self, config: DiffusionLMPolicyConfig, model: nn.Module, tokenizer, device: torch.device, model_path: str
    ):
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
        self.mask_id = config.mask_token_id if config.mask_token_id is not None else tokenizer.mask_token_id
        if self.mask_id is None:
            raise ValueError(
                f"the tokenizer of {model_path!r} has no mask token and policy.mask_token_id is not set: a masked "
                "diffusion LM needs one. Set policy.mask_token_id (LLaDA: 126336, Dream: 151666) or add a mask token."
            )
        self.eos_id = tokenizer.eos_token_id
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else self.eos_id
        if self.pad_id is None:
            raise ValueError(f"the tokenizer of {model_path!r} has neither a pad nor an EOS token; set one of them.")
        self.proxy = LIKELIHOOD_PROXIES.get(config.likelihood_proxy)
        self.seed_generator = torch.Generator().manual_seed(config.seed + 1)
        self.inner_epoch = 0

    # ---- model access --------------------------------------------------------------------------------------------
    def model_fn(self, module: nn.Module):
        """``(input_ids [B, L], attention_mask [B, L] | None) -> logits [B, L, V]`` aligned float32 logits."""
        architecture, shifted = self.config.architecture, self.config.shifted_logits

        def call(input_ids: Tensor, attention_mask: Tensor | None) -> Tensor:
            if attention_mask is not None and bool(attention_mask.all()):
                attention_mask = None  # no padding: let the model use its own full mask
            if architecture == "bidirectional_causal_lm":
                attention_mask = bidirectional_attention_bias(input_ids, attention_mask, dtype=_dtype_of(module))
            logits = module(input_ids=input_ids, attention_mask=attention_mask).logits.float()  # [B, L, V]
            if shifted:
                logits = torch.cat([logits[:, :1], logits[:, :-1]], dim=1)  # position j now predicts token j
            return logits

        return call

    # ---- rollout -------------------------------------------------------------------------------------------------
    def rollout(
        self,
        rows: list[dict[str, Any]],
        group_size: int,
        *,
        mode: Literal["train", "eval"] = "train",
        request: RolloutRequest = RolloutRequest(),
    ) -> Rollout:
        """Sample ``group_size`` answers per row by block unmasking; record decoding steps, mask seeds and old
        log-probs. The family declares no rollout structure, so ``request`` asks for nothing it fills."""
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
            pad_token_id=self.pad_id,
        )
        info: dict[str, Any] = {"prompts_skipped_too_long": len(prompts.skipped)}
        if not prompts.kept:
            return empty_rollout(info)
        prompt_ids = prompts.ids.repeat_interleave(group_size, dim=0).to(self.device)  # [N, P]
        prompt_mask = prompts.mask.repeat_interleave(group_size, dim=0).to(self.device)  # [N, P]
        with eval_mode(self.model):
            generation = generate(
                self.model_fn(self.model),
                prompt_ids,
                prompt_attention_mask=prompt_mask,
                mask_id=self.mask_id,
                gen_length=cfg.gen_length,
                block_length=cfg.block_length,
                steps=cfg.steps,
                temperature=cfg.temperature if mode == "train" else cfg.eval_temperature,
                remasking=cfg.remasking,
                confidence_threshold=cfg.confidence_threshold,
                generator=self.generator,
            )
        completion_ids = generation.completion_ids  # [N, T]
        through_eos = completion_mask_through_first_eos(completion_ids, self.eos_id)  # [N, T]
        completion_mask = through_eos if cfg.action_mask == "through_first_eos" else torch.ones_like(through_eos)
        outputs = [
            self.tokenizer.decode(ids[: int(n)].tolist(), skip_special_tokens=True)
            for ids, n in zip(completion_ids, through_eos.sum(dim=1), strict=True)
        ]
        n = completion_ids.shape[0]
        per_sample: dict[str, Tensor | list[Any]] = {
            "prompt_ids": prompt_ids,
            "prompt_mask": prompt_mask,
            "completion_ids": completion_ids,
            "completion_mask": completion_mask.to(self.device),
            "decode_step": generation.decode_step,
            "mask_seed": torch.randint(0, 2**62, (n,), generator=self.seed_generator),
        }
        self.inner_epoch = 0
        with torch.no_grad(), eval_mode(self.model):
            estimate = self._estimate(self.model, per_sample, epoch=0)
        info |= {"nfe_per_sample": generation.num_forward, "proxy_forward_per_sample": estimate.num_forward}
        info["completion_tokens"] = int(through_eos.sum())
        return Rollout(
            rows=[rows[i] for i in prompts.kept for _ in range(group_size)],
            outputs=outputs,
            group_ids=torch.arange(len(prompts.kept)).repeat_interleave(group_size),
            old_logp=estimate.logp.detach(),
            action_mask=estimate.mask,
            per_sample=per_sample,
            info=info,
        )

    # ---- score ---------------------------------------------------------------------------------------------------
    def on_inner_epoch(self, epoch: int) -> None:
        """Select the mask seeds of inner epoch ``epoch`` (0 = the rollout's); see the module docstring."""
        if epoch < 0:
            raise ValueError(f"epoch={epoch} must be >= 0.")
        self.inner_epoch = epoch

    def epoch_seeds(self, base_seeds: Tensor, epoch: int) -> Tensor:
        """``[N]`` mask seeds of inner epoch ``epoch``: the stored seeds at epoch 0 (and always with ``per_rollout``)."""
        if epoch == 0 or self.config.mask_seeds == "per_rollout":
            return base_seeds
        mixed = [(int(s) + epoch * _SEED_MIX) % (2**63 - 1) for s in base_seeds.tolist()]
        return torch.tensor(mixed, dtype=torch.long)

    def _estimate(self, module: nn.Module, data: dict[str, Any], *, epoch: int) -> ProxyOutput:
        return self.proxy(
            self.model_fn(module),
            data["prompt_ids"],
            data["completion_ids"],
            data["completion_mask"].float(),
            mask_id=self.mask_id,
            seeds=self.epoch_seeds(data["mask_seed"], epoch),
            prompt_attention_mask=data["prompt_mask"],
            decode_step=data["decode_step"],
            **self.config.proxy_args,
        )

    def score_actions(self, module: nn.Module, rollout: Rollout, request: ScoreRequest) -> ScoreOutput:
        """The proxy's log-likelihood estimate ``[n, A]`` under ``module``, with the mask seeds of the current inner
        epoch (the reference policy scores with the same seeds, so its KL compares like with like)."""
        return ScoreOutput(logp=self._estimate(module, rollout.per_sample, epoch=self.inner_epoch).logp)

    # ---- checkpoints and resumable state (weights, tokenizer and reference: TokenLMPolicy) --------------------------
    def checkpoint_facts(self) -> CheckpointFacts:
        """Sampling is genalign's block unmasking, so no generation config is saved (``generation_config`` is None)."""
        auto_class = {"masked_lm": "AutoModelForMaskedLM", "bidirectional_causal_lm": "AutoModelForCausalLM"}
        return CheckpointFacts(
            self.family,
            self.config.model,
            self.model_path,
            auto_class.get(self.config.architecture, "AutoModel"),
            lora=self.config.lora,
            trust_remote_code=self.config.architecture == "remote_code",
        )

    def random_generators(self) -> dict[str, torch.Generator]:
        return {"generator": self.generator, "seed_generator": self.seed_generator}

    def state_dict(self) -> dict[str, Any]:
        return super().state_dict() | {"inner_epoch": self.inner_epoch}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        state = dict(state)
        if "inner_epoch" not in state:
            raise ValueError(f"the diffusion_lm policy state lacks 'inner_epoch' (it holds {sorted(state)}).")
        self.inner_epoch = int(state.pop("inner_epoch"))
        super().load_state_dict(state)


def _dtype_of(module: nn.Module) -> torch.dtype:
    return next(module.parameters()).dtype


def bidirectional_attention_bias(input_ids: Tensor, attention_mask: Tensor | None, *, dtype: torch.dtype) -> Tensor:
    """``[B, 1, L, L]`` additive mask letting every position attend to every non-padding position (no causal mask).

    transformers uses a 4-D mask as given, which turns a causal decoder body into a bidirectional encoder.
    """
    batch, length = input_ids.shape
    keys = torch.ones(batch, length, dtype=torch.bool, device=input_ids.device)
    if attention_mask is not None:
        keys = attention_mask.bool()
    bias = torch.zeros(batch, 1, length, length, dtype=dtype, device=input_ids.device)
    return bias.masked_fill(~keys[:, None, None, :], torch.finfo(dtype).min)


def _load_model(config: DiffusionLMPolicyConfig, path: str, device: torch.device) -> nn.Module:
    from transformers import AutoModel, AutoModelForCausalLM, AutoModelForMaskedLM

    dtype, kwargs = DTYPES[config.dtype], attention_kwargs(config.attn_implementation)
    if config.architecture == "masked_lm":
        return AutoModelForMaskedLM.from_pretrained(path, dtype=dtype, **kwargs).to(device)
    if config.architecture == "bidirectional_causal_lm":
        return AutoModelForCausalLM.from_pretrained(path, dtype=dtype, **kwargs).to(device)
    if not Path(path).is_dir():
        raise ValueError(
            f"policy.model={path!r}: architecture='remote_code' runs the checkpoint's own code and is only allowed from "
            "a local folder you trust; download the checkpoint yourself and give its path."
        )
    return AutoModel.from_pretrained(path, dtype=dtype, trust_remote_code=True, **kwargs).to(device)


def build_policy(config: DiffusionLMPolicyConfig, device: torch.device | str = "cpu") -> DiffusionLMPolicy:
    """Load the model and tokenizer named by ``config`` and wrap them as a policy."""
    config.validate()
    device = torch.device(device)
    model_path = model_location(config.model)
    tokenizer_path = (
        model_location(config.tokenizer, field="policy.tokenizer", marker=None) if config.tokenizer else model_path
    )
    tokenizer = load_tokenizer(tokenizer_path, trust_remote_code=config.architecture == "remote_code")
    model = _load_model(config, model_path, device)
    if config.lora.rank > 0:  # peft's causal-LM wrapper needs generate(), which masked and remote-code models lack
        task_type = "CAUSAL_LM" if config.architecture == "bidirectional_causal_lm" else None
        model = add_lora(model, config.lora, task_type=task_type)
    return DiffusionLMPolicy(config, model, tokenizer, device, model_path)


CONFIG_CLASS = DiffusionLMPolicyConfig

__all__ = [
    "CONFIG_CLASS",
    "DiffusionLMPolicy",
    "DiffusionLMPolicyConfig",
    "bidirectional_attention_bias",
    "build_policy",
]
