"""What genalign knows about a diffusers flow-matching architecture, as one class per architecture registered by name.

A :class:`FlowArchitecture` answers every question the rest of genalign asks about a model family, so that the denoising
loop (:mod:`genalign.pipelines.flow`), the flow policy, the planner (:mod:`genalign.planning.flow_workload`,
:mod:`genalign.planning.depth`) and the tests never compare an architecture's name:

* calling a loaded pipeline: prompt encoding, initial latents, the transformer's velocity, decoding, schedule ``mu``;
* shapes from configs alone (no loaded pipeline), shared by :meth:`~FlowArchitecture.initial_latents` and the planner:
  the latent shape, the prompt-embedding shapes, the latents the VAE decodes;
* the transformer's blocks of each kind and a config with other block counts (the planner's shallow traces);
* LoRA target modules, the pipeline and transformer classes it serves, and a tiny random pipeline for tests;
* optionally, source images (image-to-image, editing, image-to-video): :attr:`~FlowArchitecture.source_role` says what a
  row's source image is to the model, :meth:`~FlowArchitecture.encode_sources` turns the images into conditioning
  tensors (stored with the trajectory, so re-scoring sees the very tensors the rollout saw) and
  :meth:`~FlowArchitecture.start_latents` starts image-to-image trajectories from the noised source; an architecture
  whose text encoder reads the source with the prompt (:attr:`~FlowArchitecture.source_in_prompt`, Qwen-Image-Edit)
  makes its prompt embeddings per row with :meth:`~FlowArchitecture.encode_with_sources`. The defaults describe a
  text-only architecture.

Adding an architecture is one file in this package (every module here is imported when the package is, so its
``@FLOW_ARCHITECTURES.register`` runs); ``policy.architecture`` accepts every registered name.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

import torch
from torch import Tensor, nn

from genalign.registry import Registry

if TYPE_CHECKING:
    from diffusers.pipelines.pipeline_utils import DiffusionPipeline

#: Text conditioning of a batch, keyed by the transformer's keyword names (``encoder_hidden_states`` ...), each ``[B, ...]``.
PromptEmbeddings = dict[str, Tensor]
#: Conditioning of a batch's source images, keyed by names :meth:`FlowArchitecture.velocity` reads, each ``[B, ...]``;
#: joined to both guidance branches' prompt embeddings (the source conditions both, as in diffusers' pipelines).
SourceConditioning = dict[str, Tensor]
#: A model config: a diffusers ``FrozenDict`` / plain dict, or a transformers ``PretrainedConfig``.
ModelConfig = Any


def select_embeddings(embeddings: PromptEmbeddings | None, rows: slice | Tensor) -> PromptEmbeddings | None:
    """The ``rows`` of every tensor of ``embeddings`` (None stays None)."""
    return None if embeddings is None else {k: v[rows] for k, v in embeddings.items()}


def repeat_embeddings(embeddings: PromptEmbeddings | None, repeats: int) -> PromptEmbeddings | None:
    """Every row of ``embeddings`` repeated ``repeats`` times, consecutively (None stays None)."""
    return None if embeddings is None else {k: v.repeat_interleave(repeats, dim=0) for k, v in embeddings.items()}


def join_sources(embeddings: PromptEmbeddings | None, sources: SourceConditioning | None) -> PromptEmbeddings | None:
    """``embeddings`` with the source conditioning added (None stays None: no unconditional branch)."""
    return None if embeddings is None else {**embeddings, **(sources or {})}


def config_value(config: ModelConfig, key: str) -> Any:
    """``config[key]`` of a mapping config, ``config.key`` of a transformers config."""
    return config[key] if isinstance(config, Mapping) else getattr(config, key)


def calculate_shift(seq_len: int, config: Any) -> float:
    """Dynamic-shift ``mu``: linear in the image token count (diffusers' FLUX / SD3 rule)."""
    base_len, max_len = config.get("base_image_seq_len", 256), config.get("max_image_seq_len", 4096)
    base_shift, max_shift = config.get("base_shift", 0.5), config.get("max_shift", 1.15)
    slope = (max_shift - base_shift) / (max_len - base_len)
    return seq_len * slope + base_shift - slope * base_len


def vae_scale_factor(vae_config: ModelConfig) -> int:
    """Pixels per latent of an image ``AutoencoderKL`` (diffusers' SD3 / FLUX pipelines: ``2 ** (levels - 1)``)."""
    return 2 ** (len(config_value(vae_config, "block_out_channels")) - 1)


def decode_images(pipe: DiffusionPipeline, latents: Tensor) -> list[Any]:
    """PIL images of image latents ``[B, C, h, w]`` through an ``AutoencoderKL`` with scaling and shift factors."""
    vae = pipe.vae
    scaled = latents / vae.config.scaling_factor + (vae.config.shift_factor or 0.0)
    images = vae.decode(scaled.to(vae.dtype), return_dict=False)[0]
    return pipe.image_processor.postprocess(images.float(), output_type="pil")


def encode_images(pipe: DiffusionPipeline, images: list[Any], *, height: int, width: int) -> Tensor:
    """Latents ``[B, C, h, w]`` (float32, scaled as the transformer sees them) of ``B`` RGB images resized to ``height`` x
    ``width``, through an ``AutoencoderKL``'s *mode* (diffusers' FLUX Kontext convention, ``sample_mode="argmax"``):
    deterministic, so a source image always gives the same latents."""
    vae = pipe.vae
    pixels = pipe.image_processor.preprocess(images, height=height, width=width)  # [B, 3, H, W] in [-1, 1]
    device = next(vae.parameters()).device
    latents = vae.encode(pixels.to(device=device, dtype=vae.dtype)).latent_dist.mode()
    return ((latents - (vae.config.shift_factor or 0.0)) * vae.config.scaling_factor).float()


def video_clips(video: Tensor) -> list[Any]:
    """``[F, H, W, 3]`` uint8 arrays, one per sample, of decoded videos ``[B, 3, F, H, W]`` in ``[-1, 1]``."""
    import numpy as np

    frames = ((video.float().clamp(-1, 1) + 1) * 127.5).round().to(torch.uint8)
    return [np.ascontiguousarray(clip.permute(1, 2, 3, 0).cpu().numpy()) for clip in frames]


def model_dtype(module: nn.Module) -> torch.dtype:
    """The dtype the transformer computes in: diffusers' ``ModelMixin.dtype``, which skips the parameters kept in
    float32 (``_keep_in_fp32_modules``; Wan's first parameter, ``scale_shift_table``, is one of them)."""
    from diffusers.models.modeling_utils import get_parameter_dtype

    return get_parameter_dtype(module)


class FlowArchitecture:
    """Everything genalign knows about one diffusers pipeline family. Subclasses fill in the model-specific parts."""

    name: ClassVar[str]
    #: diffusers pipeline classes this architecture drives (``policy.architecture: auto`` picks by them).
    pipeline_classes: ClassVar[tuple[str, ...]]
    #: diffusers class of the transformer (the planner finds the architecture of a transformer spec by it).
    transformer_class: ClassVar[str]
    #: True: classifier-free guidance with a negative prompt; False: guidance is an embedding input (FLUX.1).
    uses_true_cfg: ClassVar[bool] = True
    #: Run the conditional and unconditional branches in one call of twice the batch (``policy.cfg_batching``), in
    #: rollouts and in scoring alike, so re-scoring stays exact; False: two calls.
    batch_cfg: bool = False
    #: True: the pipeline always sets its schedule from the sigmas ``1, 1 - 1/S, ..., 1/S`` (FLUX-style pipelines, with
    #: or without a dynamic shift); False: from the scheduler's own timesteps unless a dynamic shift applies.
    linear_sigmas: ClassVar[bool] = False
    #: Kind of block -> the transformer config key counting it (``{"blocks": "num_layers"}``), read by the default
    #: :meth:`block_counts` and :meth:`with_block_counts`; an architecture whose kinds share a key overrides both.
    block_config_keys: ClassVar[dict[str, str]] = {}
    #: Default names of the attention projections that receive LoRA adapters.
    lora_target_modules: ClassVar[tuple[str, ...]] = ("to_q", "to_k", "to_v", "to_out.0")
    #: What a row's source image is to the model: None (text conditioning only), ``"initial_latents"``
    #: (image-to-image: trajectories start from the noised source, ``policy.strength``), ``"tokens"`` (editing: source
    #: latents as extra sequence tokens) or ``"first_frame"`` (image-to-video: first-frame latents and a mask).
    source_role: ClassVar[str | None] = None
    #: True: the text encoder reads each row's source image with its prompt (Qwen-Image-Edit's vision-language
    #: encoder), so the prompt embeddings of both guidance branches are made per row by :meth:`encode_with_sources`
    #: (never from the per-prompt cache) and stored with the trajectory like every other embedding.
    source_in_prompt: ClassVar[bool] = False
    #: Samples the VAE decodes per call (:meth:`decode` splits a batch into calls of this many; the planner traces
    #: one such call); None: the whole batch at once.
    decode_batch: ClassVar[int | None] = None
    #: The diffusers LoRA loader mixin (a name in ``diffusers.loaders``) whose ``save_lora_weights`` /
    #: ``lora_state_dict`` write and read this architecture's LoRA file, for a pipeline class that inherits none
    #: (diffusers then loads the file with ``pipe.transformer.load_lora_adapter(folder, prefix="transformer")``);
    #: None: the pipeline class's own.
    lora_loader: ClassVar[str | None] = None

    # ------------------------------------------------------------------------------ which pipelines, which modules
    @classmethod
    def serves(cls, pipeline_class: str | None, pipeline_config: Mapping[str, Any]) -> bool:
        """Whether ``policy.architecture: auto`` picks this architecture for a pipeline of ``pipeline_class`` whose
        ``model_index.json`` is ``pipeline_config`` (by default: the class is one of :attr:`pipeline_classes`)."""
        return pipeline_class in cls.pipeline_classes

    def configure(self, pipeline_config: Mapping[str, Any]) -> FlowArchitecture:
        """Read the settings a pipeline registers in its own config (``model_index.json``: Wan2.2's ``boundary_ratio``
        and ``expand_timesteps``); returns ``self``. Nothing by default."""
        return self

    def denoiser(self, pipe: DiffusionPipeline) -> nn.Module:
        """The module :meth:`velocity` calls and genalign trains: ``pipe.transformer`` by default."""
        return pipe.transformer

    def lora_files(self, pipe: DiffusionPipeline) -> Any:
        """The class whose ``save_lora_weights`` / ``lora_state_dict`` write and read LoRA files of ``pipe``: the
        pipeline's own class, or :attr:`lora_loader` when it names one."""
        if self.lora_loader is None:
            return type(pipe)
        import diffusers.loaders

        return getattr(diffusers.loaders, self.lora_loader)

    def trained_components(self, denoiser: nn.Module) -> dict[str, nn.Module]:
        """The modules of ``denoiser`` by pipeline component name, each saved as that component's weights (LoRA:
        ``pytorch_lora_weights.safetensors``, the first component's in the folder itself, the others' in a subfolder
        of their name)."""
        return {"transformer": denoiser}

    # ------------------------------------------------------------------------------ shapes from configs alone
    @classmethod
    def latent_shape(
        cls,
        transformer_config: ModelConfig,
        vae_config: ModelConfig,
        *,
        height: int,
        width: int,
        num_frames: int,
        batch: int,
    ) -> tuple[int, ...]:
        """Shape of the latents of ``batch`` samples in the layout the transformer takes (``initial_latents`` makes
        noise of this shape)."""
        raise NotImplementedError

    @classmethod
    def text_embedding_shapes(
        cls,
        transformer_config: ModelConfig,
        encoder_configs: dict[str, ModelConfig],
        *,
        max_sequence_length: int,
        batch: int,
    ) -> dict[str, tuple[int, ...]]:
        """Shapes ``{keyword: (batch, ...)}`` of the prompt embeddings :meth:`encode` returns for one branch;
        ``encoder_configs``: the configs of the pipeline's other components by role (``text_encoder``, ``vae`` ...)."""
        raise NotImplementedError

    @classmethod
    def source_shapes(
        cls,
        transformer_config: ModelConfig,
        vae_config: ModelConfig,
        *,
        height: int,
        width: int,
        num_frames: int,
        batch: int,
    ) -> dict[str, tuple[int, ...]]:
        """Shapes ``{name: (batch, ...)}`` of the conditioning :meth:`encode_sources` returns (the planner's velocity
        inputs beside the prompt embeddings); none for a text-only architecture."""
        return {}

    @classmethod
    def prompt_source_tokens(cls, encoder_configs: dict[str, ModelConfig], *, height: int, width: int) -> int:
        """Tokens the text encoder adds to the prompt for a source image of ``height`` x ``width`` pixels (only
        :attr:`source_in_prompt` architectures: their prompt embeddings are ``max_sequence_length`` plus these long);
        0 by default."""
        return 0

    @classmethod
    def latents_for_decode(cls, latents: Tensor, vae_config: ModelConfig, *, height: int, width: int) -> Tensor:
        """Final latents ``[B, ...]`` in the layout the VAE decodes (before its scaling); the identity by default."""
        return latents

    @classmethod
    def block_counts(cls, config: dict[str, Any]) -> dict[str, int]:
        """Blocks of each kind of a transformer config (every block of a kind saves the same activations); by default
        read from the config keys of :attr:`block_config_keys`."""
        if not cls.block_config_keys:
            raise NotImplementedError(f"{cls.__name__} declares no block_config_keys and no block_counts")
        return {kind: config[key] for kind, key in cls.block_config_keys.items()}

    @classmethod
    def with_block_counts(cls, config: dict[str, Any], counts: dict[str, int]) -> dict[str, Any]:
        """A copy of the transformer ``config`` with ``counts`` blocks of each kind (keys of :meth:`block_counts`)."""
        if not cls.block_config_keys:
            raise NotImplementedError(f"{cls.__name__} declares no block_config_keys and no with_block_counts")
        return copy.deepcopy(config) | {key: counts[kind] for kind, key in cls.block_config_keys.items()}

    @classmethod
    def tiny_pipeline(cls, seed: int = 0) -> DiffusionPipeline:
        """A pipeline of this architecture with random weights and tiny sizes, built from configs (tests, smoke runs)."""
        raise NotImplementedError

    # ------------------------------------------------------------------------------ calls into a loaded pipeline
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
        """Gaussian noise ``[B, ...]`` of :meth:`latent_shape` in float32 in the layout the transformer takes."""
        shape = self.latent_shape(
            pipe.transformer.config,
            pipe.vae.config,
            height=height,
            width=width,
            num_frames=num_frames,
            batch=batch_size,
        )
        return torch.randn(shape, generator=generator, device=generator.device, dtype=torch.float32)

    def encode_sources(
        self,
        pipe: DiffusionPipeline,
        images: list[Any],
        *,
        height: int,
        width: int,
        num_frames: int,
        device: torch.device,
    ) -> SourceConditioning:
        """Conditioning tensors ``{name: [B, ...]}`` (float32) of ``B`` RGB source images, resized to ``height`` x
        ``width``; deterministic (the VAE's mode, never a sample), so a source always gives the same tensors."""
        takes = [name for name in FLOW_ARCHITECTURES.names() if FLOW_ARCHITECTURES.get(name).source_role is not None]
        raise ValueError(
            f"flow architecture {self.name!r} takes no source images (its source_role is None); use an architecture "
            f"that does ({', '.join(takes)}) or drop policy.source_column."
        )

    def encode_with_sources(
        self,
        pipe: DiffusionPipeline,
        prompts: list[str],
        images: list[Any],
        *,
        negative_prompt: str,
        max_sequence_length: int,
        height: int,
        width: int,
        device: torch.device,
    ) -> tuple[PromptEmbeddings, PromptEmbeddings | None]:
        """Conditional and (``uses_true_cfg``) unconditional embeddings ``[B, ...]`` of ``prompts`` ``[B]``, each read
        with its RGB source image (resized to ``height`` x ``width``); only for :attr:`source_in_prompt`
        architectures."""
        raise ValueError(
            f"flow architecture {self.name!r} encodes its prompts without the source images (source_in_prompt is "
            "False); call encode and encode_sources."
        )

    def start_latents(self, scheduler: Any, noise: Tensor, sources: SourceConditioning | None) -> Tensor:
        """The first state ``[B, ...]`` of a trajectory from Gaussian ``noise`` ``[B, ...]`` on ``scheduler``'s current
        schedule: the noise itself, except for image-to-image (``source_role == "initial_latents"``)."""
        return noise

    def output_latents(self, latents: Tensor, conditioning: PromptEmbeddings | None) -> Tensor:
        """The final latents ``[B, ...]`` to decode, given the (conditional) embeddings joined with the source
        conditioning they were sampled with (``[B, ...]`` each): ``latents`` itself by default; Wan2.2-TI2V
        image-to-video writes the source into the first latent frame, which its denoising leaves alone."""
        return latents

    def schedule_mu(self, pipe: DiffusionPipeline, latents: Tensor, *, num_steps: int) -> float | None:
        """``mu`` for dynamic shifting of a ``num_steps``-step schedule, or None when the scheduler config does not use
        it; by default linear in the image token count (FLUX.2 makes it depend on ``num_steps`` too)."""
        if not pipe.scheduler.config.get("use_dynamic_shifting", False):
            return None
        return calculate_shift(self.image_seq_len(pipe, latents), pipe.scheduler.config)

    def image_seq_len(self, pipe: DiffusionPipeline, latents: Tensor) -> int:
        """Image tokens the transformer makes of ``latents`` ``[B, ...]``."""
        raise NotImplementedError

    def velocity(
        self, transformer: nn.Module, latents: Tensor, timestep: Tensor, embeds: PromptEmbeddings, *, guidance: float
    ) -> Tensor:
        """Predicted velocity ``[B, ...]`` in float32 for latents ``[B, ...]`` at ``timestep`` ``[B]`` (sigma x 1000)."""
        raise NotImplementedError

    def combine_guidance(self, v_cond: Tensor, v_uncond: Tensor, guidance_scale: float) -> Tensor:
        """Classifier-free guidance of the conditional and unconditional velocities ``[B, ...]``:
        ``v_u + w (v_c - v_u)`` by default (an architecture with another published rule overrides it)."""
        return v_uncond + guidance_scale * (v_cond - v_uncond)

    def decode(self, pipe: DiffusionPipeline, latents: Tensor, *, height: int, width: int) -> list[Any]:
        """Decode final latents ``[B, ...]`` into PIL images (or ``[F, H, W, 3]`` uint8 arrays for video)."""
        raise NotImplementedError

    def scheduler_config(self, pipe: DiffusionPipeline) -> dict[str, Any]:
        """Sigma-schedule settings of ``pipe.scheduler`` for :class:`~genalign.schedulers.FlowSDEScheduler`."""
        return dict(pipe.scheduler.config)


FLOW_ARCHITECTURES: Registry[type[FlowArchitecture]] = Registry("flow-matching architecture")

#: diffusers pipeline classes of flow models genalign has decided not to drive yet, with the reason (``auto`` names it
#: instead of the generic "not supported").
NOT_SUPPORTED_PIPELINES: dict[str, str] = {
    "LTX2Pipeline": "LTX-2 denoises video and audio latents jointly in one transformer (audio-video cross-attention "
    "in every block, with its own audio guidance scale and x0-space guidance rescale); genalign's flow policy keeps "
    "one latent state per sample and has no audio VAE, vocoder or Gemma-3 text connectors yet, and video-only "
    "sampling is no mode of the published pipeline (its transformer always takes the audio tokens)",
    "LTX2ImageToVideoPipeline": "LTX-2 image-to-video: see LTX2Pipeline (joint audio-video denoising)",
}


def architecture_for(pipe: DiffusionPipeline, name: str = "auto") -> FlowArchitecture:
    """The architecture helper of ``pipe``, configured from the pipeline's config: by registered ``name``, or detected
    from the pipeline class and config."""
    config = dict(pipe.config)
    return FLOW_ARCHITECTURES.get(architecture_name(name, type(pipe).__name__, config))().configure(config)


def architecture_name(name: str, pipeline_class: str | None, pipeline_config: Mapping[str, Any] | None = None) -> str:
    """``name`` when it is not ``"auto"``, else the registered architecture that serves ``pipeline_class`` with
    ``pipeline_config`` (its ``model_index.json``; :meth:`FlowArchitecture.serves`)."""
    if name != "auto":
        FLOW_ARCHITECTURES.get(name)  # an unknown name: the registry's error lists the valid ones
        return name
    for candidate in FLOW_ARCHITECTURES.names():
        if FLOW_ARCHITECTURES.get(candidate).serves(pipeline_class, pipeline_config or {}):
            return candidate
    served = dict.fromkeys(c for n in FLOW_ARCHITECTURES.names() for c in FLOW_ARCHITECTURES.get(n).pipeline_classes)
    reason = f" ({NOT_SUPPORTED_PIPELINES[pipeline_class]})" if pipeline_class in NOT_SUPPORTED_PIPELINES else ""
    raise ValueError(
        f"pipeline class {pipeline_class!r} is not a supported flow-matching pipeline{reason}; supported: "
        f"{', '.join(served)}. "
        f"Set policy.architecture to one of {', '.join(FLOW_ARCHITECTURES.names())} for a subclass with another name."
    )


def architecture_of_transformer(class_name: str) -> type[FlowArchitecture] | None:
    """The first registered architecture whose transformer class is ``class_name`` (None: no flow architecture)."""
    for candidate in FLOW_ARCHITECTURES.names():
        if FLOW_ARCHITECTURES.get(candidate).transformer_class == class_name:
            return FLOW_ARCHITECTURES.get(candidate)
    return None
