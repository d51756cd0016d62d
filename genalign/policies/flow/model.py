"""The flow model the policy trains: a diffusers pipeline with per-step log-probabilities, its trainable weights
(LoRA on the attention projections, or every transformer weight), cached prompt embeddings, the random generators of
sampling, chunked denoising and decoding, and saving/loading in diffusers' formats."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from genalign.assets import model_location
from genalign.pipelines.architectures.base import (
    PromptEmbeddings,
    SourceConditioning,
    repeat_embeddings,
    select_embeddings,
)
from genalign.pipelines.flow import FlowLogProbPipeline, FlowTrajectory, concat_trajectories, denoise, skipped_steps
from genalign.policies.base import DTYPES
from genalign.policies.flow.components import ParameterAverage, PromptEmbeddingCache
from genalign.policies.flow.config import FlowPolicyConfig
from genalign.policies.flow.sources import source_images


class FlowModel:
    """Pipeline, transformer, trainable weights, prompt cache and generators of one flow policy.

    Generators: ``generator`` (initial noise and SDE noise, on the model's device), ``mask_generator`` (which steps
    are stochastic / trained) and ``point_generator`` (flow-matching points of likelihood-free training).
    """

    def __init__(self, config: FlowPolicyConfig, device: torch.device) -> None:
        self.config = config
        self.device = device
        dtype = DTYPES[config.dtype]
        self.sampler = FlowLogProbPipeline.from_pretrained(
            model_location(config.model, marker="model_index.json"),
            torch_dtype=dtype,
            device=device,
            architecture=config.architecture,
            dynamics=config.dynamics,
            noise_level=config.noise_level,
            log_prob_reduction=config.log_prob_reduction,
            log_prob_form=config.log_prob_form,
            strength=config.strength,
        )
        self.arch = self.sampler.arch
        if self.arch.source_role is not None and config.noise_search.enabled:
            raise ValueError(
                f"policy.noise_search with the source-conditioned architecture {self.arch.name!r}: the search ranks "
                "noises without the source images; disable policy.noise_search."
            )
        self.arch.batch_cfg = config.cfg_batching == "batched"
        self.scheduler = self.sampler.scheduler
        self.transformer: nn.Module = self.sampler.transformer
        if dtype == torch.float16:  # fp16 VAEs overflow; decoding in float32 costs little
            self.sampler.pipe.vae.to(torch.float32)
        for module in self.sampler.pipe.components.values():
            if isinstance(module, nn.Module):
                module.requires_grad_(False)
                module.eval()
        self._add_trainable_weights()
        #: SAGE-GRPO's moving anchor [76]: a snapshot of the trained weights serving as the KL reference
        self.anchor: ParameterAverage | None = None
        if config.gradient_checkpointing:
            self.transformer.enable_gradient_checkpointing()
        self.embeddings = PromptEmbeddingCache(self._encode, config.prompt_cache_size)
        self.generator = torch.Generator(device).manual_seed(config.seed)
        self.mask_generator = torch.Generator().manual_seed(config.seed + 1)
        self.point_generator = torch.Generator().manual_seed(config.seed + 2)

    # ------------------------------------------------------------------------------------------------- weights
    def _add_trainable_weights(self) -> None:
        add_trainable_weights(self.transformer, self.config, self.arch.lora_target_modules)

    def trainable_parameters(self) -> list[nn.Parameter]:
        return [p for p in self.transformer.parameters() if p.requires_grad]

    @contextmanager
    def reference(self) -> Iterator[None]:
        """Inside the block the transformer is the reference policy: the moving anchor's weights when
        ``policy.anchor_every > 0`` (:attr:`anchor`, set by the policy), else the base model (LoRA adapters
        disabled)."""
        if self.anchor is not None:
            with self.anchor.applied():
                yield
            return
        self.transformer.disable_adapters()
        try:
            yield
        finally:
            self.transformer.enable_adapters()

    # ------------------------------------------------------------------------------------------------ sampling
    def _encode(self, prompts: list[str]) -> tuple[PromptEmbeddings, PromptEmbeddings | None]:
        return self.sampler.encode(
            prompts, negative_prompt=self.config.negative_prompt, max_sequence_length=self.config.max_sequence_length
        )

    def prompt_embeddings(
        self, prompts: list[str], guidance: float
    ) -> tuple[PromptEmbeddings, PromptEmbeddings | None]:
        """Conditional and unconditional embeddings ``[N, ...]``; the unconditional ones are None when there is no
        unconditional branch to run (CFG-free, or FLUX's embedded guidance)."""
        cond, uncond = self.embeddings(prompts)
        if not self.arch.uses_true_cfg or guidance == 1.0:
            uncond = None
        return cond, uncond

    def conditioning(
        self, rows: list[dict[str, Any]], repeats: int, guidance: float
    ) -> tuple[PromptEmbeddings, PromptEmbeddings | None, SourceConditioning | None]:
        """Conditional and unconditional prompt embeddings and the source conditioning of ``rows``, each row's
        ``repeats`` times consecutively (``[len(rows) * repeats, ...]`` each): the cached embeddings of the prompts and
        :meth:`sources`, or, for an architecture whose text encoder reads the source image
        (``arch.source_in_prompt``), embeddings encoded per row with its image."""
        if not self.arch.source_in_prompt:
            prompts = [row["prompt"] for row in rows for _ in range(repeats)]
            return *self.prompt_embeddings(prompts, guidance), self.sources(rows, repeats)
        cfg = self.config
        images = source_images(rows, cfg.source_column)
        cond, uncond = self.sampler.encode_with_sources(
            [row["prompt"] for row in rows], images, negative_prompt=cfg.negative_prompt,
            max_sequence_length=cfg.max_sequence_length, height=cfg.height, width=cfg.width,
        )  # fmt: skip
        if not self.arch.uses_true_cfg or guidance == 1.0:
            uncond = None
        encoded = self.sampler.encode_sources(images, height=cfg.height, width=cfg.width, num_frames=cfg.num_frames)
        return (repeat_embeddings(cond, repeats), repeat_embeddings(uncond, repeats),
                repeat_embeddings(encoded, repeats))  # fmt: skip

    def sources(self, rows: list[dict[str, Any]], repeats: int) -> SourceConditioning | None:
        """The conditioning ``{name: [len(rows) * repeats, ...]}`` of the rows' source images (``policy.source_column``),
        each row's ``repeats`` times consecutively; None for a text-only architecture."""
        if self.arch.source_role is None:
            return None
        cfg = self.config
        encoded = self.sampler.encode_sources(
            source_images(rows, cfg.source_column), height=cfg.height, width=cfg.width, num_frames=cfg.num_frames
        )
        return repeat_embeddings(encoded, repeats)

    def start_latents(self, noise: Tensor, sources: SourceConditioning | None) -> Tensor:
        """First states ``[N, ...]`` from ``noise`` on the current schedule (image-to-image: the noised sources)."""
        return self.arch.start_latents(self.scheduler, noise, sources)

    def denoising_steps(self, num_steps: int) -> int:
        """Steps a rollout of a ``num_steps`` schedule takes: all of them, but for image-to-image
        (``policy.strength < 1``) the ones left after :func:`~genalign.pipelines.flow.skipped_steps`."""
        return num_steps - skipped_steps(num_steps, self.config.strength)

    def set_rollout_schedule(self, info: dict[str, Any], num_actions: int, latents: Tensor) -> None:
        """The schedule a training rollout was sampled on (its ``info["schedule_steps"]``, else ``num_actions``
        steps), for latents shaped like ``latents`` ``[n, ...]``, even after an evaluation changed it."""
        self.sampler.set_schedule(int(info.get("schedule_steps", num_actions)), latents)

    def initial_latents(self, count: int, num_steps: int) -> Tensor:
        """``count`` initial noises ``[count, ...]`` from ``generator``; sets the schedule of ``num_steps`` steps."""
        cfg = self.config
        return self.sampler.prepare(
            count,
            height=cfg.height,
            width=cfg.width,
            num_frames=cfg.num_frames,
            num_inference_steps=num_steps,
            generator=self.generator,
        )

    def denoise_in_chunks(
        self,
        latents: Tensor,
        cond: PromptEmbeddings,
        uncond: PromptEmbeddings | None,
        sde_mask: Tensor,
        *,
        prompts: list[str],
        guidance: float,
        record_latents: bool,
        noise_level: Tensor | None = None,
        ode_solver: str | None = None,
    ) -> tuple[FlowTrajectory, list[Any]]:
        """Denoise ``latents`` ``[N, ...]`` ``sample_batch_size`` samples at a time (the chunks the trainer's
        micro-batches should match) and decode; returns the joined trajectory and the ``[N]`` outputs.
        ``noise_level`` ``[S]``: one level per step (default: ``config.noise_level`` on every stochastic step);
        ``ode_solver``: of the deterministic steps (default: ``config.ode_solver``)."""
        n = latents.shape[0]
        chunk = self.config.sample_batch_size or n
        pieces, outputs = [], []
        for start in range(0, n, chunk):
            part = slice(start, min(start + chunk, n))
            piece = denoise(
                self.arch,
                self.transformer,
                self.scheduler,
                latents[part],
                select_embeddings(cond, part),
                select_embeddings(uncond, part),
                guidance_scale=guidance,
                sde_mask=sde_mask[part],
                noise_level=self.config.noise_level if noise_level is None else noise_level,
                generator=self.generator,
                record_latents=record_latents,
                ode_solver=ode_solver or self.config.ode_solver,
                prompts=prompts[part],
            )
            pieces.append(piece)
            outputs += self.decode(piece.final, select_embeddings(cond, part))
        return concat_trajectories(pieces), outputs

    def decode(self, latents: Tensor, conditioning: PromptEmbeddings | None = None) -> list[Any]:
        """Outputs of final latents ``[n, ...]`` sampled with ``conditioning`` (the conditional embeddings joined with
        the source conditioning, ``[n, ...]`` each; ``arch.output_latents``)."""
        latents = self.arch.output_latents(latents, conditioning)
        return self.sampler.decode(latents, height=self.config.height, width=self.config.width)

    # --------------------------------------------------------------------------------------------- save / load
    def save(self, directory: Path) -> None:
        """LoRA: ``pytorch_lora_weights.safetensors`` readable by ``pipe.load_lora_weights(directory)``, with the
        adapter's peft config (rank, alpha, targets, DoRA, rsLoRA) in the file's ``lora_adapter_metadata`` header
        (diffusers >= 0.35 builds the adapter from it, so the loaded LoRA has the trained scale ``alpha / rank``
        rather than diffusers' fallback ``alpha = rank``); full fine-tuning: the transformer as a diffusers folder
        ``directory/transformer``. A second trained component (Wan2.2's low-noise expert ``transformer_2``) is saved
        the same way in ``directory/transformer_2`` (its LoRA loads with ``pipe.load_lora_weights(directory /
        "transformer_2", load_into_transformer_2=True)``). A pipeline class without a LoRA loader (HunyuanVideo 1.5)
        gets the file of the architecture's ``lora_loader``, read by ``pipe.transformer.load_lora_adapter``."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        for index, (name, module) in enumerate(self.arch.trained_components(self.transformer).items()):
            if self.config.lora.rank == 0:
                module.save_pretrained(directory / name)
                continue
            from peft.utils import get_peft_model_state_dict

            (adapter,) = module.peft_config.values()  # the one adapter added by _add_trainable_weights
            self.arch.lora_files(self.sampler.pipe).save_lora_weights(
                directory if index == 0 else directory / name,
                transformer_lora_layers=get_peft_model_state_dict(module),
                transformer_lora_adapter_metadata=adapter.to_dict(),
            )

    def load(self, directory: Path) -> None:
        """Load weights written by :meth:`save` into the current adapter (or the full transformer); files with or
        without the adapter metadata (the weights are the same)."""
        directory = Path(directory)
        for index, (name, module) in enumerate(self.arch.trained_components(self.transformer).items()):
            if self.config.lora.rank == 0:
                module.load_state_dict(type(module).from_pretrained(directory / name).state_dict())
                continue
            self._load_lora(module, directory if index == 0 else directory / name)

    def _load_lora(self, module: nn.Module, directory: Path) -> None:
        from peft.utils import set_peft_model_state_dict

        state = self.arch.lora_files(self.sampler.pipe).lora_state_dict(directory)
        state = state[0] if isinstance(state, tuple) else state
        prefix = "transformer."
        adapter_state = {k[len(prefix) :]: v for k, v in state.items() if k.startswith(prefix)}
        if not adapter_state:
            raise ValueError(f"no transformer LoRA weights found in {str(directory)!r}; was it written by save()?")
        result = set_peft_model_state_dict(module, adapter_state)
        unexpected = getattr(result, "unexpected_keys", [])
        if unexpected:
            raise ValueError(
                f"LoRA weights in {str(directory)!r} do not fit this model: unexpected keys {unexpected[:5]}."
            )

    # ----------------------------------------------------------------------------------------------- state
    def random_generators(self) -> dict[str, torch.Generator]:
        return {"generator": self.generator, "mask_generator": self.mask_generator,
                "point_generator": self.point_generator}  # fmt: skip

    def state_dict(self) -> dict[str, Any]:
        """The random generators (everything else of the model is its weights)."""
        return {name: generator.get_state() for name, generator in self.random_generators().items()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for name, generator in self.random_generators().items():
            generator.set_state(state[name])


def add_trainable_weights(transformer: nn.Module, config: FlowPolicyConfig, default_targets: tuple[str, ...]) -> None:
    """Make ``transformer``'s trained weights trainable: every weight (``policy.lora.rank`` 0), or LoRA adapters in
    float32 on ``policy.lora.target_modules`` (None: ``default_targets``, the architecture's attention projections)."""
    lora = config.lora
    if lora.rank == 0:
        transformer.requires_grad_(True)
        return
    from diffusers.training_utils import cast_training_params

    targets = lora.target_modules if lora.target_modules is not None else list(default_targets)
    transformer.add_adapter(lora.peft_config(target_modules=targets, task_type=None))
    cast_training_params(transformer, dtype=torch.float32)  # LoRA weights train in float32
