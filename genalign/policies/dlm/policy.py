"""Masked diffusion language models (LLaDA, Dream, DiffuCoder, any bidirectional transformers model) as policies.

Rollout: prompts are tokenized and left-padded (:mod:`genalign.policies.lm.prompts`), answers are sampled by block
unmasking (:func:`genalign.schedulers.masked_diffusion.generate`), and each sample gets a *mask seed*. Score: the
configured likelihood proxy (:data:`genalign.policies.dlm.likelihood.LIKELIHOOD_PROXIES`) estimates the log-likelihood of the
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

from pathlib import Path
from typing import Any, Literal

import torch
from torch import Tensor, nn

from genalign.assets import model_location
from genalign.policies.base import Rollout, RolloutRequest, ScoreOutput, ScoreRequest
from genalign.policies.dlm import TrainedDecoding
from genalign.policies.dlm.config import DiffusionLMPolicyConfig
from genalign.policies.dlm.likelihood import LIKELIHOOD_PROXIES, ProxyOutput
from genalign.policies.lm.core import (
    DTYPES,
    TokenLMPolicy,
    TrainedModule,
    attention_kwargs,
    empty_rollout,
    eval_mode,
    lora_reference_mode,
)
from genalign.policies.lm.export import CheckpointFacts
from genalign.policies.lm.lora import add_lora
from genalign.policies.lm.prompts import encode_prompts
from genalign.policies.lm.reference import ReferencePolicy
from genalign.policies.lm.tokenizer import load_tokenizer
from genalign.schedulers.masked_diffusion import completion_mask_through_first_eos, generate

_SEED_MIX = 6364136223846793005  # odd 63-bit multiplier (Knuth's LCG): epoch k's seed = base + k · mix (mod 2^63 - 1)


class DiffusionLMPolicy(TokenLMPolicy):
    """A masked diffusion LM behind the :class:`~genalign.policies.base.Policy` contract.

    ``per_sample`` of its rollouts: ``prompt_ids`` / ``prompt_mask`` ``[N, P]`` (left-padded), ``completion_ids``
    ``[N, T]``, ``completion_mask`` ``[N, T]`` (the trained answer tokens), ``decode_step`` ``[N, T]`` (the step that
    committed each token) and ``mask_seed`` ``[N]`` (long); with a decoding policy also its records
    ``decoding/<key>`` ``[N, S, ...]``. The action axis is the proxy's: ``T`` tokens, or 1 (2 for ``spg``) per
    sequence, followed by one action per decoding step with a decoding policy (only those with ``freeze_denoiser``).
    """

    family = "diffusion_lm"
    missing_feature_reasons = {
        **TokenLMPolicy.missing_feature_reasons,
        "entropy": "has no per-action entropy (its actions are likelihood-proxy terms); set the entropy coefficient to 0",
        "vocab_term": "has no next-token logits per action (its actions are likelihood-proxy terms)",
        "topk_logp": "has no next-token distribution per action (its actions are likelihood-proxy terms)",
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
        self.proxy = LIKELIHOOD_PROXIES.get(config.likelihood_proxy.name)
        self.seed_generator = torch.Generator().manual_seed(config.seed + 1)
        self.inner_epoch = 0
        self.decoding: TrainedDecoding | None = None  # the trainable decoding policy (Co-GRPO [179], SAS [118])
        if config.decoding_policy is not None:
            self.decoding = TrainedDecoding(
                config.decoding_policy.name,
                config.decoding_policy.args,
                gen_length=config.gen_length,
                block_length=config.block_length,
                steps=config.steps,
                remasking=config.remasking,
                device=device,
            )
        if config.freeze_denoiser:
            self.model.requires_grad_(False)

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
        counts: dict[str, int] = {"prompts_skipped_too_long": len(prompts.skipped)}
        if not prompts.kept:
            return empty_rollout(counts)
        prompt_ids = prompts.ids.repeat_interleave(group_size, dim=0).to(self.device)  # [N, P]
        prompt_mask = prompts.mask.repeat_interleave(group_size, dim=0).to(self.device)  # [N, P]
        generation, structure = self._generate(prompt_ids, prompt_mask, mode)
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
        if self.decoding is not None:
            per_sample |= TrainedDecoding.per_sample_of(generation.records)
        self.inner_epoch = 0
        with torch.no_grad(), eval_mode(self.model):
            old_logp, action_mask, proxy_forward = self._actions(self.model, per_sample, epoch=0)
        info = {"nfe_per_sample": generation.num_forward, "proxy_forward_per_sample": proxy_forward}
        counts["completion_tokens"] = int(through_eos.sum())
        return Rollout(
            rows=[rows[i] for i in prompts.kept for _ in range(group_size)],
            outputs=outputs,
            group_ids=torch.arange(len(prompts.kept)).repeat_interleave(group_size),
            old_logp=old_logp.detach(),
            action_mask=action_mask,
            structure=structure,
            per_sample=per_sample,
            info=info,
            counts=counts,
        )

    def _generate(
        self, prompt_ids: Tensor, prompt_mask: Tensor, mode: Literal["train", "eval"]
    ) -> tuple[Any, dict[str, Tensor]]:
        """Block unmasking by the heuristic sampler, or by the decoding policy (whose per-step pathwise
        log-likelihood goes into the structure, ``path_logp`` ``[N, S]``)."""
        cfg = self.config
        sampler = {
            "mask_id": self.mask_id,
            "gen_length": cfg.gen_length,
            "block_length": cfg.block_length,
            "steps": cfg.steps,
            "temperature": cfg.temperature if mode == "train" else cfg.eval_temperature,
            "generator": self.generator,
        }
        structure: dict[str, Tensor] = {}
        with eval_mode(self.model):
            if self.decoding is None:
                generation = generate(
                    self.model_fn(self.model),
                    prompt_ids,
                    prompt_attention_mask=prompt_mask,
                    remasking=cfg.remasking,
                    confidence_threshold=cfg.confidence_threshold,
                    **sampler,
                )
            else:
                greedy = mode == "eval" and cfg.decoding_policy_eval == "argmax"
                generation = self.decoding.generate(
                    self.model_fn(self.model), prompt_ids, prompt_mask, greedy=greedy, **sampler
                )
                structure = {"path_logp": generation.path_logp}
        return generation, structure

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
            **self.config.likelihood_proxy.args,
        )

    def _actions(
        self, module: nn.Module, data: dict[str, Any], *, epoch: int, reference: bool = False
    ) -> tuple[Tensor, Tensor, int]:
        """``(logp [n, A], mask [n, A], proxy forwards per sample)``: the proxy's actions under ``module`` (none with
        ``freeze_denoiser``), then one action per decoding step of the decoding policy (its initial parameters for
        ``reference``), see :mod:`genalign.policies.dlm.trained`."""
        logps, masks, forwards = [], [], 0
        if not self.config.freeze_denoiser:
            estimate = self._estimate(module, data, epoch=epoch)
            logps, masks, forwards = [estimate.logp], [estimate.mask], estimate.num_forward
        if self.decoding is not None:
            logp, decision = self.decoding.logp(data, reference=reference)  # [n, S]
            device = logps[0].device if logps else logp.device
            logps, masks = [*logps, logp.to(device)], [*masks, decision.to(device)]
        return torch.cat(logps, dim=1), torch.cat(masks, dim=1), forwards

    def score_actions(self, module: nn.Module, rollout: Rollout, request: ScoreRequest) -> ScoreOutput:
        """The proxy's log-likelihood estimate ``[n, A]`` under ``module``, with the mask seeds of the current inner
        epoch (the reference policy scores with the same seeds, so its KL compares like with like), followed by the
        decoding policy's log-probabilities ``[n, S]`` when one is configured."""
        return ScoreOutput(self._actions(module, rollout.per_sample, epoch=self.inner_epoch)[0])

    def reference_logprobs(self, rollout: Rollout) -> Tensor:
        """``[n, A]`` under the reference: the proxy under the reference model (skipped with a frozen denoiser),
        the decoding actions under the decoding policy's initial parameters."""
        if self.decoding is None:
            return super().reference_logprobs(rollout)
        data, epoch = rollout.per_sample, self.inner_epoch
        if self.config.freeze_denoiser:
            return self._actions(self.model, data, epoch=epoch, reference=True)[0]
        proxy = self.reference(lambda module: self._estimate(module, data, epoch=epoch).logp)  # [n, A - S]
        decoding = self.decoding.logp(data, reference=True)[0].to(proxy.device)  # [n, S]
        return torch.cat([proxy, decoding], dim=1)

    # ---- parameters and weights with a decoding policy -----------------------------------------------------------
    def trained_modules(self) -> list[TrainedModule]:
        """The denoiser (unless ``freeze_denoiser``) and the decoding policy (``decoding_policy.safetensors``) when one
        is configured; a checkpoint with a frozen denoiser holds the tokenizer and the decoding policy only."""
        parts = [] if self.config.freeze_denoiser else super().trained_modules()
        if self.decoding is not None:
            parts.append(TrainedModule(self.decoding.module, self.decoding.save, self.decoding.load))
        return parts

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
        model = add_lora(model, config.lora, task_type=config.lora_task_type())
    return DiffusionLMPolicy(config, model, tokenizer, device, model_path)


CONFIG_CLASS = DiffusionLMPolicyConfig

__all__ = [
    "CONFIG_CLASS",
    "DiffusionLMPolicy",
    "DiffusionLMPolicyConfig",
    "bidirectional_attention_bias",
    "build_policy",
]
