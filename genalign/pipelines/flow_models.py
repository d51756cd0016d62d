"""How each diffusers flow-matching architecture is called: prompt encoding, latent layout, transformer call, decoding.

One small class per architecture, registered by name. The denoising loop (:mod:`genalign.pipelines.flow`) and the
flow policy never special-case a model: they call these methods.

* ``sd3``: ``SD3Transformer2DModel`` (SD3 / SD3.5), latents ``[B, C, h, w]``, timestep ``sigma * 1000``, pooled text.
* ``flux``: ``FluxTransformer2DModel`` (FLUX.1), latents packed 2x2 into tokens ``[B, h/2 * w/2, 4C]`` with image ids,
  timestep ``sigma``, guidance *embedded* (FLUX.1-dev is guidance-distilled: no unconditional branch).
* ``wan``: ``WanTransformer3DModel`` (Wan2.1 T2V), video latents ``[B, C, F', h, w]``, timestep ``sigma * 1000``.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
import torch
from diffusers.pipelines.pipeline_utils import DiffusionPipeline
from torch import Tensor, nn

from genalign.registry import Registry

#: Text conditioning of a batch, keyed by the transformer's keyword names (``encoder_hidden_states`` ...), each ``[B, ...]``.
PromptEmbeddings = dict[str, Tensor]


def select_embeddings(embeddings: PromptEmbeddings | None, rows: slice | Tensor) -> PromptEmbeddings | None:
    """The ``rows`` of every tensor of ``embeddings`` (None stays None)."""
    return None if embeddings is None else {k: v[rows] for k, v in embeddings.items()}


def repeat_embeddings(embeddings: PromptEmbeddings | None, repeats: int) -> PromptEmbeddings | None:
    """Every row of ``embeddings`` repeated ``repeats`` times, consecutively (None stays None)."""
    return None if embeddings is None else {k: v.repeat_interleave(repeats, dim=0) for k, v in embeddings.items()}


def _calculate_shift(seq_len: int, config: Any) -> float:
    """Dynamic-shift ``mu``: linear in the image token count (diffusers' FLUX / SD3 rule)."""
    base_len, max_len = config.get("base_image_seq_len", 256), config.get("max_image_seq_len", 4096)
    base_shift, max_shift = config.get("base_shift", 0.5), config.get("max_shift", 1.15)
    slope = (max_shift - base_shift) / (max_len - base_len)
    return seq_len * slope + base_shift - slope * base_len


class FlowArchitecture:
    """Calls into one diffusers pipeline family. Subclasses fill in the model-specific parts."""

    name: ClassVar[str]
    pipeline_classes: ClassVar[tuple[str, ...]]
    #: True: classifier-free guidance with a negative prompt; False: guidance is an embedding input (FLUX.1).
    uses_true_cfg: ClassVar[bool] = True
    #: Run the conditional and unconditional branches in one call of twice the batch (``policy.cfg_batching``), in
    #: rollouts and in scoring alike, so re-scoring stays exact; False: two calls.
    batch_cfg: bool = False
    #: Default names of the attention projections that receive LoRA adapters.
    lora_target_modules: ClassVar[tuple[str, ...]] = ("to_q", "to_k", "to_v", "to_out.0")

    def encode(
        self,
        pipe: DiffusionPipeline,
        prompts: list[str],
        *,
        negative_prompt: str,
        max_sequence_length: int,
        device: torch.device,
    ) -> tuple[PromptEmbeddings, PromptEmbeddings | None]:
        """Encode ``prompts`` (``[B]``) into conditional and, when ``uses_true_cfg``, unconditional embeddings."""
        raise NotImplementedError

    def initial_latents(
        self,
        pipe: DiffusionPipeline,
        batch_size: int,
        *,
        height: int,
        width: int,
        num_frames: int,
        generator: torch.Generator,
    ) -> Tensor:
        """Gaussian noise ``[B, ...]`` in float32 in the layout the transformer takes."""
        raise NotImplementedError

    def schedule_mu(self, pipe: DiffusionPipeline, latents: Tensor) -> float | None:
        """``mu`` for dynamic shifting, or None when the scheduler config does not use it."""
        if not pipe.scheduler.config.get("use_dynamic_shifting", False):
            return None
        return _calculate_shift(self.image_seq_len(pipe, latents), pipe.scheduler.config)

    def image_seq_len(self, pipe: DiffusionPipeline, latents: Tensor) -> int:
        raise NotImplementedError

    def velocity(
        self, transformer: nn.Module, latents: Tensor, timestep: Tensor, embeds: PromptEmbeddings, *, guidance: float
    ) -> Tensor:
        """Predicted velocity ``[B, ...]`` in float32 for latents ``[B, ...]`` at ``timestep`` ``[B]`` (sigma x 1000)."""
        raise NotImplementedError

    def decode(self, pipe: DiffusionPipeline, latents: Tensor, *, height: int, width: int) -> list[Any]:
        """Decode final latents ``[B, ...]`` into PIL images (or ``[F, H, W, 3]`` uint8 arrays for video)."""
        raise NotImplementedError

    def scheduler_config(self, pipe: DiffusionPipeline) -> dict[str, Any]:
        """Sigma-schedule settings of ``pipe.scheduler`` for :class:`~genalign.schedulers.FlowSDEScheduler`."""
        return dict(pipe.scheduler.config)


FLOW_ARCHITECTURES: Registry[type[FlowArchitecture]] = Registry("flow-matching architecture")


def _model_dtype(module: nn.Module) -> torch.dtype:
    """The dtype the transformer computes in: diffusers' ``ModelMixin.dtype``, which skips the parameters kept in
    float32 (``_keep_in_fp32_modules``; Wan's first parameter, ``scale_shift_table``, is one of them)."""
    from diffusers.models.modeling_utils import get_parameter_dtype

    return get_parameter_dtype(module)


@FLOW_ARCHITECTURES.register("sd3")
class SD3Architecture(FlowArchitecture):
    name = "sd3"
    pipeline_classes = ("StableDiffusion3Pipeline",)
    lora_target_modules = ("to_q", "to_k", "to_v", "to_out.0", "add_q_proj", "add_k_proj", "add_v_proj", "to_add_out")

    def encode(self, pipe, prompts, *, negative_prompt, max_sequence_length, device):
        cond, uncond, pooled, uncond_pooled = pipe.encode_prompt(
            prompt=prompts,
            prompt_2=None,
            prompt_3=None,
            device=device,
            do_classifier_free_guidance=True,
            negative_prompt=[negative_prompt] * len(prompts),
            max_sequence_length=max_sequence_length,
        )
        return (
            {"encoder_hidden_states": cond, "pooled_projections": pooled},
            {"encoder_hidden_states": uncond, "pooled_projections": uncond_pooled},
        )

    def initial_latents(self, pipe, batch_size, *, height, width, num_frames, generator):
        channels = pipe.transformer.config.in_channels
        shape = (batch_size, channels, height // pipe.vae_scale_factor, width // pipe.vae_scale_factor)
        return torch.randn(shape, generator=generator, device=generator.device, dtype=torch.float32)

    def image_seq_len(self, pipe, latents):
        patch = pipe.transformer.config.patch_size
        return (latents.shape[-2] // patch) * (latents.shape[-1] // patch)

    def velocity(self, transformer, latents, timestep, embeds, *, guidance):
        dtype = _model_dtype(transformer)
        out = transformer(
            hidden_states=latents.to(dtype),
            timestep=timestep.to(dtype),
            encoder_hidden_states=embeds["encoder_hidden_states"].to(dtype),
            pooled_projections=embeds["pooled_projections"].to(dtype),
            return_dict=False,
        )[0]
        return out.float()

    def decode(self, pipe, latents, *, height, width):
        vae = pipe.vae
        scaled = latents / vae.config.scaling_factor + (vae.config.shift_factor or 0.0)
        images = vae.decode(scaled.to(vae.dtype), return_dict=False)[0]
        return pipe.image_processor.postprocess(images.float(), output_type="pil")


@FLOW_ARCHITECTURES.register("flux")
class FluxArchitecture(FlowArchitecture):
    name = "flux"
    pipeline_classes = ("FluxPipeline",)
    uses_true_cfg = False
    _grid: tuple[int, int] = (0, 0)
    lora_target_modules = ("to_q", "to_k", "to_v", "to_out.0", "add_q_proj", "add_k_proj", "add_v_proj", "to_add_out")

    def encode(self, pipe, prompts, *, negative_prompt, max_sequence_length, device):
        cond, pooled, _text_ids = pipe.encode_prompt(
            prompt=prompts, prompt_2=None, device=device, max_sequence_length=max_sequence_length
        )
        return {"encoder_hidden_states": cond, "pooled_projections": pooled}, None

    def _latent_hw(self, pipe, height: int, width: int) -> tuple[int, int]:
        scale = pipe.vae_scale_factor * 2
        return 2 * (height // scale), 2 * (width // scale)

    def initial_latents(self, pipe, batch_size, *, height, width, num_frames, generator):
        h, w = self._latent_hw(pipe, height, width)
        self._grid = (h // 2, w // 2)  # token grid of the packed latents, for the image position ids
        channels = pipe.transformer.config.in_channels // 4
        noise = torch.randn((batch_size, channels, h, w), generator=generator, device=generator.device)
        return pipe._pack_latents(noise, batch_size, channels, h, w)  # [B, h/2 * w/2, 4C]

    def image_seq_len(self, pipe, latents):
        return latents.shape[1]

    def velocity(self, transformer, latents, timestep, embeds, *, guidance):
        dtype = _model_dtype(transformer)
        batch, tokens, _ = latents.shape
        rows, cols = self._grid if self._grid[0] * self._grid[1] == tokens else (round(tokens**0.5),) * 2
        if rows * cols != tokens:
            raise ValueError(f"FLUX latents with {tokens} tokens do not match the last image grid; sample them first.")
        image_ids = torch.zeros(rows, cols, 3, device=latents.device)
        image_ids[..., 1] += torch.arange(rows, device=latents.device)[:, None]
        image_ids[..., 2] += torch.arange(cols, device=latents.device)[None, :]
        text = embeds["encoder_hidden_states"]
        guidance_input = None
        if transformer.config.guidance_embeds:
            guidance_input = torch.full((batch,), guidance, device=latents.device, dtype=torch.float32)
        out = transformer(
            hidden_states=latents.to(dtype),
            timestep=(timestep / 1000).to(dtype),
            guidance=guidance_input,
            pooled_projections=embeds["pooled_projections"].to(dtype),
            encoder_hidden_states=text.to(dtype),
            txt_ids=torch.zeros(text.shape[1], 3, device=latents.device, dtype=dtype),
            img_ids=image_ids.reshape(tokens, 3).to(dtype),
            return_dict=False,
        )[0]
        return out.float()

    def decode(self, pipe, latents, *, height, width):
        vae = pipe.vae
        h, w = self._latent_hw(pipe, height, width)
        unpacked = pipe._unpack_latents(
            latents, h * pipe.vae_scale_factor, w * pipe.vae_scale_factor, pipe.vae_scale_factor
        )
        scaled = unpacked / vae.config.scaling_factor + (vae.config.shift_factor or 0.0)
        images = vae.decode(scaled.to(vae.dtype), return_dict=False)[0]
        return pipe.image_processor.postprocess(images.float(), output_type="pil")


@FLOW_ARCHITECTURES.register("wan")
class WanArchitecture(FlowArchitecture):
    name = "wan"
    pipeline_classes = ("WanPipeline",)

    def encode(self, pipe, prompts, *, negative_prompt, max_sequence_length, device):
        cond, uncond = pipe.encode_prompt(
            prompt=prompts,
            negative_prompt=[negative_prompt] * len(prompts),
            do_classifier_free_guidance=True,
            max_sequence_length=max_sequence_length,
            device=device,
        )
        return {"encoder_hidden_states": cond}, {"encoder_hidden_states": uncond}

    def initial_latents(self, pipe, batch_size, *, height, width, num_frames, generator):
        if (num_frames - 1) % pipe.vae_scale_factor_temporal != 0:
            raise ValueError(
                f"num_frames={num_frames} must be 1 + a multiple of {pipe.vae_scale_factor_temporal} for Wan; "
                f"use e.g. {1 + pipe.vae_scale_factor_temporal * max(1, num_frames // pipe.vae_scale_factor_temporal)}."
            )
        frames = (num_frames - 1) // pipe.vae_scale_factor_temporal + 1
        spatial = pipe.vae_scale_factor_spatial
        shape = (batch_size, pipe.transformer.config.in_channels, frames, height // spatial, width // spatial)
        return torch.randn(shape, generator=generator, device=generator.device)

    def image_seq_len(self, pipe, latents):
        _, _, frames, h, w = latents.shape
        patch = pipe.transformer.config.patch_size
        return (frames // patch[0]) * (h // patch[1]) * (w // patch[2])

    def velocity(self, transformer, latents, timestep, embeds, *, guidance):
        dtype = _model_dtype(transformer)
        out = transformer(
            hidden_states=latents.to(dtype),
            timestep=timestep,
            encoder_hidden_states=embeds["encoder_hidden_states"].to(dtype),
            return_dict=False,
        )[0]
        return out.float()

    def decode(self, pipe, latents, *, height, width):
        vae = pipe.vae
        z_dim = vae.config.z_dim
        mean = torch.tensor(vae.config.latents_mean).view(1, z_dim, 1, 1, 1).to(latents.device)
        std = torch.tensor(vae.config.latents_std).view(1, z_dim, 1, 1, 1).to(latents.device)
        video = vae.decode((latents * std + mean).to(vae.dtype), return_dict=False)[0]  # [B, 3, F, H, W] in [-1, 1]
        frames = ((video.float().clamp(-1, 1) + 1) * 127.5).round().to(torch.uint8)
        return [np.ascontiguousarray(clip.permute(1, 2, 3, 0).cpu().numpy()) for clip in frames]  # [F, H, W, 3] each

    def scheduler_config(self, pipe):
        config = dict(pipe.scheduler.config)
        if "flow_shift" in config:  # Wan ships UniPC with ``flow_shift``; the flow sigma schedule calls it ``shift``
            config["shift"] = config["flow_shift"]
        return config


def architecture_for(pipe: DiffusionPipeline, name: str = "auto") -> FlowArchitecture:
    """The architecture helper of ``pipe``: by registered ``name``, or detected from the pipeline class."""
    if name != "auto":
        return FLOW_ARCHITECTURES.get(name)()
    class_name = type(pipe).__name__
    for candidate in FLOW_ARCHITECTURES.names():
        helper = FLOW_ARCHITECTURES.get(candidate)
        if class_name in helper.pipeline_classes:
            return helper()
    raise ValueError(
        f"pipeline class {class_name!r} is not a supported flow-matching pipeline; supported: "
        f"{', '.join(c for n in FLOW_ARCHITECTURES.names() for c in FLOW_ARCHITECTURES.get(n).pipeline_classes)}. "
        "Pass architecture='sd3' / 'flux' / 'wan' for a subclass with a different name."
    )
