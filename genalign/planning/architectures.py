"""Published architecture configs of the models the full-scale presets name, for planning without the weights.

A planner builds every model on the ``meta`` device from its config, so parameter counts are exact; for a model whose
folder is on this machine the folder's own ``config.json`` / ``model_index.json`` is read (:mod:`.model_specs`).
For the hub ids of the presets, whose folders are usually not here, this table holds the same configs, copied from
the ``config.json`` files published with each model on huggingface.co (the file is named in each entry's ``source``;
the total printed by ``genalign plan`` was checked against the total the model card states, quoted there too).

Remote-code models (LLaDA, DiffuCoder / Dream) are entered as the transformers class with the same parameter shapes
(``stand_in`` says which): their modules have other names but the same tensors, so counts and memory agree.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class ComponentSpec:
    """One model of a checkpoint: the library and class that build it and the class's config.

    Attributes:
        library: ``transformers``, ``diffusers`` or ``open_clip``.
        class_name: e.g. ``Qwen2ForCausalLM``, ``SD3Transformer2DModel``, ``T5EncoderModel``, or an open_clip name.
        config: the keyword config (transformers: ``model_type`` plus the config fields).
    """

    library: str
    class_name: str
    config: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class PublishedModel:
    """A checkpoint's components by role (``model`` for a single model; a pipeline's component names otherwise), with
    the diffusers pipeline class of a pipeline (``_class_name`` of its model_index.json) and the pipeline's own
    settings there (``pipeline_config``: Wan2.2's ``boundary_ratio``, ``expand_timesteps``; ``auto`` reads them)."""

    components: dict[str, ComponentSpec]
    source: str
    stand_in: str | None = None
    pipeline_class: str | None = None
    pipeline_config: dict[str, Any] = field(default_factory=dict)


def _qwen2(hidden: int, intermediate: int, layers: int, heads: int, kv_heads: int, **extra: Any) -> dict[str, Any]:
    return {"model_type": "qwen2", "hidden_size": hidden, "intermediate_size": intermediate,
            "num_hidden_layers": layers, "num_attention_heads": heads, "num_key_value_heads": kv_heads,
            "vocab_size": 152064, "tie_word_embeddings": False, "rms_norm_eps": 1e-6, **extra}  # fmt: skip


# CLIP / T5 text encoders of the diffusers pipelines (config.json of each pipeline's text_encoder* folder).
_CLIP_L = {"model_type": "clip_text_model", "vocab_size": 49408, "hidden_size": 768, "intermediate_size": 3072,
           "projection_dim": 768, "num_hidden_layers": 12, "num_attention_heads": 12, "max_position_embeddings": 77,
           "hidden_act": "quick_gelu"}  # fmt: skip
_CLIP_BIG_G = {"model_type": "clip_text_model", "vocab_size": 49408, "hidden_size": 1280, "intermediate_size": 5120,
               "projection_dim": 1280, "num_hidden_layers": 32, "num_attention_heads": 20,
               "max_position_embeddings": 77, "hidden_act": "gelu"}  # fmt: skip
_T5_XXL = {"model_type": "t5", "vocab_size": 32128, "d_model": 4096, "d_ff": 10240, "d_kv": 64, "num_heads": 64,
           "num_layers": 24, "feed_forward_proj": "gated-gelu", "relative_attention_num_buckets": 32}  # fmt: skip
_UMT5_XXL = {**_T5_XXL, "model_type": "umt5", "vocab_size": 256384}
_VAE_16CH = {"in_channels": 3, "out_channels": 3, "latent_channels": 16, "block_out_channels": [128, 256, 512, 512],
             "down_block_types": ["DownEncoderBlock2D"] * 4, "up_block_types": ["UpDecoderBlock2D"] * 4,
             "layers_per_block": 2, "norm_num_groups": 32, "use_quant_conv": False, "use_post_quant_conv": False}  # fmt: skip

_QWEN25_7B = PublishedModel(
    {"model": ComponentSpec("transformers", "Qwen2ForCausalLM", _qwen2(3584, 18944, 28, 28, 4, rope_theta=1e6))},
    source="Qwen/Qwen2.5-7B-Instruct config.json; model card: 7.61B parameters",
)
_QWEN25_MATH_7B = PublishedModel(
    {"model": ComponentSpec("transformers", "Qwen2ForCausalLM", _qwen2(3584, 18944, 28, 28, 4, rope_theta=1e4))},
    source="Qwen/Qwen2.5-Math-7B config.json (the Qwen2.5-7B body, 4k positions); model card: 7.6B parameters",
)
_QWEN25_32B = PublishedModel(
    {"model": ComponentSpec("transformers", "Qwen2ForCausalLM", _qwen2(5120, 27648, 64, 40, 8, rope_theta=1e6))},
    source="Qwen/Qwen2.5-32B config.json; model card: 32.5B parameters, Hub safetensors total 32.8B",
)
_QWEN25_VL_7B = PublishedModel(
    {
        "model": ComponentSpec(
            "transformers",
            "Qwen2_5_VLForConditionalGeneration",
            {
                "model_type": "qwen2_5_vl",
                "text_config": {
                    **_qwen2(3584, 18944, 28, 28, 4, rope_theta=1e6),
                    "model_type": "qwen2_5_vl_text",
                    "rope_scaling": {"type": "mrope", "mrope_section": [16, 24, 24]},
                },
                "vision_config": {
                    "depth": 32,
                    "hidden_size": 1280,
                    "intermediate_size": 3420,
                    "num_heads": 16,
                    "out_hidden_size": 3584,
                    "patch_size": 14,
                    "spatial_merge_size": 2,
                    "temporal_patch_size": 2,
                    "window_size": 112,
                    "hidden_act": "silu",
                    "fullatt_block_indexes": [7, 15, 23, 31],
                    "in_chans": 3,
                },
                "image_token_id": 151655,
                "video_token_id": 151656,
            },
        )
    },
    source="Qwen/Qwen2.5-VL-7B-Instruct config.json; model card: 8.29B parameters (7B language model + 675M vision)",
)
_LLADA_8B = PublishedModel(
    {
        "model": ComponentSpec(
            "transformers",
            "LlamaForCausalLM",
            {
                "model_type": "llama",
                "hidden_size": 4096,
                "intermediate_size": 12288,
                "num_hidden_layers": 32,
                "num_attention_heads": 32,
                "num_key_value_heads": 32,
                "vocab_size": 126464,
                "tie_word_embeddings": False,
                "rms_norm_eps": 1e-5,
                "rope_theta": 500000.0,
                "attention_bias": False,
                "mlp_bias": False,
            },
        )
    },
    source="GSAI-ML/LLaDA-8B-Instruct config.json (d_model 4096, n_layers 32, n_heads 32, mlp_hidden_size 12288, "
    "vocab 126464, no weight tying, no biases); LLaDA paper: 8.02B parameters",
    stand_in="LlamaForCausalLM with LLaDA's shapes (LLaDA's blocks hold the same q/k/v/o, gate/up/down tensors)",
)
_DIFFUCODER_7B = PublishedModel(
    {"model": ComponentSpec("transformers", "Qwen2ForCausalLM", _qwen2(3584, 18944, 28, 28, 4, rope_theta=1e6))},
    source="apple/DiffuCoder-7B-Instruct config.json (Dream architecture on Qwen2.5-Coder-7B: hidden 3584, 28 layers, "
    "28/4 heads, intermediate 18944, vocab 152064); model card: 7.6B parameters",
    stand_in="Qwen2ForCausalLM with Dream's shapes (Dream keeps the Qwen2 module layout, attention made bidirectional)",
)
# ---- causal LMs of the architecture matrix (Qwen3, Qwen3-MoE, Gemma3, Llama 3.1): config.json of each checkpoint
_QWEN3_8B = PublishedModel(
    {"model": ComponentSpec("transformers", "Qwen3ForCausalLM", {
        "model_type": "qwen3", "hidden_size": 4096, "intermediate_size": 12288, "num_hidden_layers": 36,
        "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 151936,
        "tie_word_embeddings": False, "rms_norm_eps": 1e-6, "rope_theta": 1e6, "max_position_embeddings": 40960,
        "attention_bias": False})},
    source="Qwen/Qwen3-8B config.json (36 layers, hidden 4096, 32/8 heads of 128, q/k norms, untied head); model "
    "card: 8.2B parameters (6.95B without embeddings)",
)  # fmt: skip
_QWEN3_30B_A3B = PublishedModel(
    {"model": ComponentSpec("transformers", "Qwen3MoeForCausalLM", {
        "model_type": "qwen3_moe", "hidden_size": 2048, "intermediate_size": 6144, "moe_intermediate_size": 768,
        "num_experts": 128, "num_experts_per_tok": 8, "norm_topk_prob": True, "decoder_sparse_step": 1,
        "mlp_only_layers": [], "num_hidden_layers": 48, "num_attention_heads": 32, "num_key_value_heads": 4,
        "head_dim": 128, "vocab_size": 151936, "tie_word_embeddings": False, "rms_norm_eps": 1e-6, "rope_theta": 1e6,
        "max_position_embeddings": 40960, "router_aux_loss_coef": 0.001, "output_router_logits": False})},
    source="Qwen/Qwen3-30B-A3B config.json (48 layers, hidden 2048, 128 experts of width 768, 8 routed per token); "
    "model card: 30.5B parameters, 3.3B activated",
)  # fmt: skip
_GEMMA3_1B = PublishedModel(
    {"model": ComponentSpec("transformers", "Gemma3ForCausalLM", {
        "model_type": "gemma3_text", "hidden_size": 1152, "intermediate_size": 6912, "num_hidden_layers": 26,
        "num_attention_heads": 4, "num_key_value_heads": 1, "head_dim": 256, "query_pre_attn_scalar": 256,
        "vocab_size": 262144, "sliding_window": 512, "sliding_window_pattern": 6, "rope_theta": 1e6,
        "rope_local_base_freq": 10000.0, "max_position_embeddings": 32768, "rms_norm_eps": 1e-6,
        "hidden_activation": "gelu_pytorch_tanh", "final_logit_softcapping": None, "attn_logit_softcapping": None,
        "tie_word_embeddings": True})},
    source="google/gemma-3-1b-it config.json (text only: 26 layers, 5 local sliding-window layers of 512 per global "
    "one, 4/1 heads of 256, tied 262k embedding); model card: 1B parameters",
)  # fmt: skip
_LLAMA31_8B = PublishedModel(
    {"model": ComponentSpec("transformers", "LlamaForCausalLM", {
        "model_type": "llama", "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
        "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 128256, "tie_word_embeddings": False,
        "rms_norm_eps": 1e-5, "max_position_embeddings": 131072,
        "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                         "original_max_position_embeddings": 8192},
        "rope_theta": 500000.0, "attention_bias": False, "mlp_bias": False})},
    source="meta-llama/Llama-3.1-8B-Instruct config.json (32 layers, hidden 4096, 32/8 heads, 128k vocabulary, "
    "llama3 rope scaling); model card: 8B parameters (8.03B)",
)  # fmt: skip
_SD35_MEDIUM = PublishedModel(
    {
        "transformer": ComponentSpec(
            "diffusers",
            "SD3Transformer2DModel",
            {
                "sample_size": 128,
                "patch_size": 2,
                "in_channels": 16,
                "num_layers": 24,
                "attention_head_dim": 64,
                "num_attention_heads": 24,
                "joint_attention_dim": 4096,
                "caption_projection_dim": 1536,
                "pooled_projection_dim": 2048,
                "out_channels": 16,
                "pos_embed_max_size": 384,
                "dual_attention_layers": list(range(13)),
                "qk_norm": "rms_norm",
            },
        ),
        "text_encoder": ComponentSpec("transformers", "CLIPTextModelWithProjection", _CLIP_L),
        "text_encoder_2": ComponentSpec("transformers", "CLIPTextModelWithProjection", _CLIP_BIG_G),
        "text_encoder_3": ComponentSpec("transformers", "T5EncoderModel", _T5_XXL),
        "vae": ComponentSpec("diffusers", "AutoencoderKL", _VAE_16CH),
    },
    source="stabilityai/stable-diffusion-3.5-medium model_index.json and transformer/, text_encoder*/, vae/ "
    "config.json; model card: 2.5B parameters (the diffusers transformer of this config holds 2.24B)",
    pipeline_class="StableDiffusion3Pipeline",
)
_FLUX1_DEV = PublishedModel(
    {
        "transformer": ComponentSpec(
            "diffusers",
            "FluxTransformer2DModel",
            {
                "patch_size": 1,
                "in_channels": 64,
                "num_layers": 19,
                "num_single_layers": 38,
                "attention_head_dim": 128,
                "num_attention_heads": 24,
                "joint_attention_dim": 4096,
                "pooled_projection_dim": 768,
                "guidance_embeds": True,
                "axes_dims_rope": [16, 56, 56],
            },
        ),
        "text_encoder": ComponentSpec("transformers", "CLIPTextModel", _CLIP_L),
        "text_encoder_2": ComponentSpec("transformers", "T5EncoderModel", _T5_XXL),
        "vae": ComponentSpec("diffusers", "AutoencoderKL", _VAE_16CH),
    },
    source="black-forest-labs/FLUX.1-dev model_index.json and transformer/, text_encoder*/, vae/ config.json; model "
    "card: 12B-parameter rectified-flow transformer",
    pipeline_class="FluxPipeline",
)


_WAN21_VAE = {"base_dim": 96, "z_dim": 16, "dim_mult": [1, 2, 4, 4], "num_res_blocks": 2,
              "temperal_downsample": [False, True, True]}  # fmt: skip
#: Wan2.2's VAE (TI2V-5B): 48 latent channels, 2 x 2 patching inside, 16 x 16 pixels and 4 frames per latent
_WAN22_VAE = {"base_dim": 160, "decoder_base_dim": 256, "z_dim": 48, "dim_mult": [1, 2, 4, 4], "num_res_blocks": 2,
              "temperal_downsample": [False, True, True], "is_residual": True, "in_channels": 12, "out_channels": 12,
              "patch_size": 2, "scale_factor_temporal": 4, "scale_factor_spatial": 16}  # fmt: skip


def _wan(heads: int, ffn: int, layers: int, source: str, *, channels: int = 16, vae: dict | None = None,
         experts: int = 1, pipeline_config: dict | None = None) -> PublishedModel:  # fmt: skip
    """A ``WanPipeline``; ``experts=2``: Wan2.2 A14B's second transformer (``transformer_2``, the same config)."""
    transformer = {"patch_size": [1, 2, 2], "num_attention_heads": heads, "attention_head_dim": 128,
                   "in_channels": channels, "out_channels": channels, "text_dim": 4096, "freq_dim": 256, "ffn_dim": ffn,
                   "num_layers": layers, "cross_attn_norm": True, "qk_norm": "rms_norm_across_heads", "eps": 1e-6}  # fmt: skip
    spec = ComponentSpec("diffusers", "WanTransformer3DModel", transformer)
    return PublishedModel(
        {
            "transformer": spec,
            **({"transformer_2": spec} if experts == 2 else {}),
            "text_encoder": ComponentSpec("transformers", "UMT5EncoderModel", _UMT5_XXL),
            "vae": ComponentSpec("diffusers", "AutoencoderKLWan", vae or _WAN21_VAE),
        },
        source=source,
        pipeline_class="WanPipeline",
        pipeline_config=pipeline_config or {},
    )


_WAN21_1_3B = _wan(12, 8960, 30, "Wan-AI/Wan2.1-T2V-1.3B-Diffusers model_index.json and component config.json; "
                   "model card: 1.3B parameters")  # fmt: skip
_WAN21_14B = _wan(40, 13824, 40, "Wan-AI/Wan2.1-T2V-14B-Diffusers model_index.json and component config.json; "
                  "model card: 14B parameters")  # fmt: skip
_WAN22_A14B = _wan(
    40, 13824, 40,
    "Wan-AI/Wan2.2-T2V-A14B-Diffusers model_index.json (boundary_ratio 0.875) and component config.json (transformer "
    "and transformer_2: the Wan2.1-14B transformer config each); model card: 27B parameters, 14B active per step. "
    "Planned: the trained expert's activations (one expert runs per step), the other expert's weights frozen (its "
    "LoRA weights and optimizer state, a few MB at rank 32, are not counted)",
    experts=2, pipeline_config={"transformer_2": ["diffusers", "WanTransformer3DModel"], "boundary_ratio": 0.875,
                                "expand_timesteps": False},
)  # fmt: skip
_WAN22_TI2V_5B = _wan(
    24, 14336, 30,
    "Wan-AI/Wan2.2-TI2V-5B-Diffusers model_index.json (expand_timesteps true) and component config.json; model "
    "card: 5B parameters, 720p (704 x 1280) at 24 fps with the Wan2.2 VAE (16 x 16 x 4 compression)",
    channels=48, vae=_WAN22_VAE, pipeline_config={"boundary_ratio": None, "expand_timesteps": True},
)  # fmt: skip

_QWEN_IMAGE = PublishedModel(
    {
        "transformer": ComponentSpec(
            "diffusers",
            "QwenImageTransformer2DModel",
            {
                "patch_size": 2,
                "in_channels": 64,
                "out_channels": 16,
                "num_layers": 60,
                "attention_head_dim": 128,
                "num_attention_heads": 24,
                "joint_attention_dim": 3584,
                "guidance_embeds": False,
                "axes_dims_rope": [16, 56, 56],
            },
        ),
        "text_encoder": _QWEN25_VL_7B.components["model"],
        "vae": ComponentSpec(
            "diffusers",
            "AutoencoderKLQwenImage",
            {
                "base_dim": 96,
                "z_dim": 16,
                "dim_mult": [1, 2, 4, 4],
                "num_res_blocks": 2,
                "attn_scales": [],
                "temperal_downsample": [False, True, True],
                "dropout": 0.0,
            },
        ),
    },
    source="Qwen/Qwen-Image model_index.json and transformer/, text_encoder/ (Qwen2.5-VL-7B-Instruct), vae/ "
    "config.json; model card: 20B-parameter MMDiT",
    pipeline_class="QwenImagePipeline",
)
_QWEN_IMAGE_EDIT = PublishedModel(
    dict(_QWEN_IMAGE.components),
    source="Qwen/Qwen-Image-Edit model_index.json (QwenImageEditPipeline, with a Qwen2VLProcessor) and transformer/, "
    "text_encoder/ (Qwen2.5-VL-7B-Instruct), vae/ config.json, the same configs as Qwen-Image's; model card: the "
    "20B Qwen-Image continued on editing, the source image read by both the VL encoder and the VAE",
    pipeline_class="QwenImageEditPipeline",
)
_FLUX2_VAE = {"in_channels": 3, "out_channels": 3, "latent_channels": 32, "block_out_channels": [128, 256, 512, 512],
              "down_block_types": ["DownEncoderBlock2D"] * 4, "up_block_types": ["UpDecoderBlock2D"] * 4,
              "layers_per_block": 2, "norm_num_groups": 32, "patch_size": [2, 2]}  # fmt: skip


def _flux2_transformer(double: int, single: int, heads: int, text_width: int, guidance: bool) -> ComponentSpec:
    """A ``Flux2Transformer2DModel``: 128 patchified latent channels, 128-wide heads, MLP ratio 3, prompt embeddings
    of three text-encoder layers (``joint_attention_dim = 3 x`` the encoder's width)."""
    return ComponentSpec(
        "diffusers",
        "Flux2Transformer2DModel",
        {
            "patch_size": 1,
            "in_channels": 128,
            "num_layers": double,
            "num_single_layers": single,
            "attention_head_dim": 128,
            "num_attention_heads": heads,
            "joint_attention_dim": 3 * text_width,
            "timestep_guidance_channels": 256,
            "mlp_ratio": 3.0,
            "axes_dims_rope": [32, 32, 32, 32],
            "rope_theta": 2000,
            "guidance_embeds": guidance,
        },
    )


_FLUX2_DEV = PublishedModel(
    {
        "transformer": _flux2_transformer(8, 48, 48, 5120, guidance=True),
        "text_encoder": ComponentSpec(
            "transformers",
            "Mistral3ForConditionalGeneration",
            {
                "model_type": "mistral3",
                "text_config": {
                    "model_type": "mistral",
                    "hidden_size": 5120,
                    "intermediate_size": 32768,
                    "num_hidden_layers": 40,
                    "num_attention_heads": 32,
                    "num_key_value_heads": 8,
                    "head_dim": 128,
                    "vocab_size": 131072,
                    "rope_theta": 1e9,
                    "tie_word_embeddings": False,
                },
                "vision_config": {
                    "model_type": "pixtral",
                    "hidden_size": 1024,
                    "intermediate_size": 4096,
                    "num_hidden_layers": 24,
                    "num_attention_heads": 16,
                    "head_dim": 64,
                    "image_size": 1540,
                    "patch_size": 14,
                },
                "spatial_merge_size": 2,
                "multimodal_projector_bias": False,
                "image_token_index": 10,
            },
        ),
        "vae": ComponentSpec("diffusers", "AutoencoderKLFlux2", _FLUX2_VAE),
    },
    source="black-forest-labs/FLUX.2-dev model_index.json and transformer/, text_encoder/ (Mistral-Small-3.1-24B), "
    "vae/ config.json; model card: 32B-parameter rectified-flow transformer, 24B text encoder",
    pipeline_class="Flux2Pipeline",
)
_FLUX2_KLEIN_4B = PublishedModel(
    {
        "transformer": _flux2_transformer(5, 20, 24, 2560, guidance=False),
        "text_encoder": ComponentSpec(
            "transformers",
            "Qwen3ForCausalLM",
            {
                "model_type": "qwen3",
                "hidden_size": 2560,
                "intermediate_size": 9728,
                "num_hidden_layers": 36,
                "num_attention_heads": 32,
                "num_key_value_heads": 8,
                "head_dim": 128,
                "vocab_size": 151936,
                "tie_word_embeddings": True,
                "rope_theta": 1e6,
                "rms_norm_eps": 1e-6,
            },
        ),
        "vae": ComponentSpec("diffusers", "AutoencoderKLFlux2", _FLUX2_VAE),
    },
    source="black-forest-labs/FLUX.2-klein-base-4B model_index.json and transformer/ (5 double, 20 single blocks, "
    "24 heads), text_encoder/ (Qwen3-4B), vae/ config.json; model card: 4B-parameter flow transformer",
    pipeline_class="Flux2KleinPipeline",
)

#: ByT5-small as ``T5EncoderModel`` (google/byt5-small config.json), HunyuanVideo 1.5's glyph encoder (Glyph-SDXL-v2
#: weights; its few hundred added colour / font tokens are not counted: under 0.1 % of the model)
_BYT5_SMALL = {"model_type": "t5", "vocab_size": 384, "d_model": 1472, "d_ff": 3584, "d_kv": 64, "num_heads": 6,
               "num_layers": 12, "feed_forward_proj": "gated-gelu", "relative_attention_num_buckets": 32}  # fmt: skip
_HUNYUAN_VIDEO15_480P = PublishedModel(
    {
        "transformer": ComponentSpec(
            "diffusers",
            "HunyuanVideo15Transformer3DModel",
            {
                "in_channels": 65,
                "out_channels": 32,
                "num_attention_heads": 16,
                "attention_head_dim": 128,
                "num_layers": 54,
                "num_refiner_layers": 2,
                "mlp_ratio": 4.0,
                "patch_size": 1,
                "patch_size_t": 1,
                "qk_norm": "rms_norm",
                "text_embed_dim": 3584,
                "text_embed_2_dim": 1472,
                "image_embed_dim": 1152,
                "rope_theta": 256.0,
                "rope_axes_dim": [16, 56, 56],
                "use_meanflow": False,
                "target_size": 640,
                "task_type": "t2v",
            },
        ),
        "text_encoder": ComponentSpec(
            "transformers",
            "Qwen2_5_VLTextModel",
            _QWEN25_VL_7B.components["model"].config["text_config"],
        ),
        "text_encoder_2": ComponentSpec("transformers", "T5EncoderModel", _BYT5_SMALL),
        "vae": ComponentSpec(
            "diffusers",
            "AutoencoderKLHunyuanVideo15",
            {
                "latent_channels": 32,
                "block_out_channels": [128, 256, 512, 1024, 1024],
                "layers_per_block": 2,
                "spatial_compression_ratio": 16,
                "temporal_compression_ratio": 4,
                "scaling_factor": 1.03682,
            },
        ),
    },
    source="hunyuanvideo-community/HunyuanVideo-1.5-Diffusers-480p_t2v model_index.json and transformer/ (54 "
    "dual-stream blocks, 16 heads of 128), text_encoder/ (the language model of Qwen2.5-VL-7B-Instruct), "
    "text_encoder_2/ (ByT5-small), vae/ config.json (diffusers' conversion script's 480p_t2v configs); model card: "
    "8.3B-parameter DiT, 480p (480 x 848) 121 frames at 24 fps",
    pipeline_class="HunyuanVideo15Pipeline",
)

#: SigLIP so400m-patch14-384 (google/siglip-so400m-patch14-384 vision config.json): HunyuanVideo 1.5's image encoder,
#: 729 tokens of 1152 per image
_SIGLIP_SO400M = {"model_type": "siglip_vision_model", "hidden_size": 1152, "intermediate_size": 4304,
                  "num_hidden_layers": 27, "num_attention_heads": 16, "image_size": 384, "patch_size": 14}  # fmt: skip
_HUNYUAN_VIDEO15_480P_I2V = PublishedModel(
    {
        **_HUNYUAN_VIDEO15_480P.components,
        "transformer": ComponentSpec(
            "diffusers",
            "HunyuanVideo15Transformer3DModel",
            _HUNYUAN_VIDEO15_480P.components["transformer"].config | {"task_type": "i2v"},
        ),
        "image_encoder": ComponentSpec("transformers", "SiglipVisionModel", _SIGLIP_SO400M),
    },
    source="hunyuanvideo-community/HunyuanVideo-1.5-Diffusers-480p_i2v model_index.json and transformer/ (the 480p "
    "t2v config, task_type i2v), image_encoder/ (SigLIP so400m-patch14-384), the text encoders and VAE of the t2v "
    "model; model card: 8.3B-parameter DiT",
    pipeline_class="HunyuanVideo15ImageToVideoPipeline",
)

_DC_AE_SANA = {
    "in_channels": 3,
    "latent_channels": 32,
    "attention_head_dim": 32,
    "encoder_block_types": ["ResBlock"] * 3 + ["EfficientViTBlock"] * 3,
    "decoder_block_types": ["ResBlock"] * 3 + ["EfficientViTBlock"] * 3,
    "encoder_block_out_channels": [128, 256, 512, 512, 1024, 1024],
    "decoder_block_out_channels": [128, 256, 512, 512, 1024, 1024],
    "encoder_layers_per_block": [2, 2, 2, 3, 3, 3],
    "decoder_layers_per_block": [3, 3, 3, 3, 3, 3],
    "encoder_qkv_multiscales": [[], [], [], [5], [5], [5]],
    "decoder_qkv_multiscales": [[], [], [], [5], [5], [5]],
    "upsample_block_type": "interpolate",
    "downsample_block_type": "conv",
    "decoder_norm_types": "rms_norm",
    "decoder_act_fns": "silu",
    "scaling_factor": 0.41407,
}
_SANA_1600M_1024 = PublishedModel(
    {
        "transformer": ComponentSpec(
            "diffusers",
            "SanaTransformer2DModel",
            {
                "in_channels": 32,
                "out_channels": 32,
                "num_attention_heads": 70,
                "attention_head_dim": 32,
                "num_layers": 20,
                "num_cross_attention_heads": 20,
                "cross_attention_head_dim": 112,
                "cross_attention_dim": 2240,
                "caption_channels": 2304,
                "mlp_ratio": 2.5,
                "sample_size": 32,
                "patch_size": 1,
            },
        ),
        "text_encoder": ComponentSpec(
            "transformers",
            "Gemma2Model",
            {
                "model_type": "gemma2",
                "hidden_size": 2304,
                "intermediate_size": 9216,
                "num_hidden_layers": 26,
                "num_attention_heads": 8,
                "num_key_value_heads": 4,
                "head_dim": 256,
                "vocab_size": 256000,
            },
        ),
        "vae": ComponentSpec("diffusers", "AutoencoderDC", _DC_AE_SANA),
    },
    source="Efficient-Large-Model/Sana_1600M_1024px_diffusers model_index.json and transformer/, text_encoder/ "
    "(gemma-2-2b-it), vae/ (DC-AE f32c32 sana-1.0) config.json; model card: 1.6B-parameter linear DiT",
    pipeline_class="SanaPipeline",
)

#: CLIP ViT-H/14 as transformers' CLIPModel (PickScore_v1, laion/CLIP-ViT-H-14-laion2B-s32B-b79K config.json).
CLIP_VIT_H14 = ComponentSpec(
    "transformers",
    "CLIPModel",
    {
        "model_type": "clip",
        "projection_dim": 1024,
        "text_config": {
            "vocab_size": 49408,
            "hidden_size": 1024,
            "intermediate_size": 4096,
            "num_hidden_layers": 24,
            "num_attention_heads": 16,
            "max_position_embeddings": 77,
            "hidden_act": "gelu",
        },
        "vision_config": {
            "hidden_size": 1280,
            "intermediate_size": 5120,
            "num_hidden_layers": 32,
            "num_attention_heads": 16,
            "patch_size": 14,
            "image_size": 224,
            "hidden_act": "gelu",
        },
    },
)

#: Published models by hub id; :func:`published_model` also finds them by the last path component (a local copy).
PUBLISHED_MODELS: dict[str, PublishedModel] = {
    "Qwen/Qwen2.5-7B-Instruct": _QWEN25_7B,
    "Qwen/Qwen2.5-7B": _QWEN25_7B,
    "Qwen/Qwen2.5-Math-7B": _QWEN25_MATH_7B,
    "Qwen/Qwen2.5-32B": _QWEN25_32B,
    "Qwen/Qwen2.5-32B-Instruct": _QWEN25_32B,
    "Qwen/Qwen2.5-VL-7B-Instruct": _QWEN25_VL_7B,
    "GSAI-ML/LLaDA-8B-Instruct": _LLADA_8B,
    "apple/DiffuCoder-7B-Instruct": _DIFFUCODER_7B,
    "Qwen/Qwen3-8B": _QWEN3_8B,
    "Qwen/Qwen3-30B-A3B": _QWEN3_30B_A3B,
    "google/gemma-3-1b-it": _GEMMA3_1B,
    "meta-llama/Llama-3.1-8B-Instruct": _LLAMA31_8B,
    "stabilityai/stable-diffusion-3.5-medium": _SD35_MEDIUM,
    "black-forest-labs/FLUX.1-dev": _FLUX1_DEV,
    "Qwen/Qwen-Image": _QWEN_IMAGE,
    "Qwen/Qwen-Image-Edit": _QWEN_IMAGE_EDIT,
    "black-forest-labs/FLUX.2-dev": _FLUX2_DEV,
    "black-forest-labs/FLUX.2-klein-base-4B": _FLUX2_KLEIN_4B,
    "black-forest-labs/FLUX.2-klein-4B": _FLUX2_KLEIN_4B,
    "Efficient-Large-Model/Sana_1600M_1024px_diffusers": _SANA_1600M_1024,
    "Wan-AI/Wan2.1-T2V-1.3B-Diffusers": _WAN21_1_3B,
    "Wan-AI/Wan2.1-T2V-14B-Diffusers": _WAN21_14B,
    "Wan-AI/Wan2.2-T2V-A14B-Diffusers": _WAN22_A14B,
    "Wan-AI/Wan2.2-TI2V-5B-Diffusers": _WAN22_TI2V_5B,
    "hunyuanvideo-community/HunyuanVideo-1.5-Diffusers-480p_t2v": _HUNYUAN_VIDEO15_480P,
    "hunyuanvideo-community/HunyuanVideo-1.5-Diffusers-480p_i2v": _HUNYUAN_VIDEO15_480P_I2V,
}


def published_model(name: str) -> PublishedModel | None:
    """The table entry for ``name``: a hub id, or a local path whose last component is a table entry's model name."""
    if name in PUBLISHED_MODELS:
        return PUBLISHED_MODELS[name]
    tail = name.rstrip("/").rsplit("/", 1)[-1]
    return next((model for key, model in PUBLISHED_MODELS.items() if key.rsplit("/", 1)[-1] == tail), None)


__all__ = ["CLIP_VIT_H14", "PUBLISHED_MODELS", "ComponentSpec", "PublishedModel", "published_model"]
