"""Sana: ``SanaTransformer2DModel`` (linear-attention DiT blocks with cross-attention to the text), latents
``[B, C, H/32, W/32]`` of the deep-compression autoencoder ``AutoencoderDC`` (decoded after dividing by its scaling
factor), timestep ``sigma * 1000 * timestep_scale``, Gemma-2 prompt embeddings with an attention mask: the prompt is
prefixed with the pipeline's *complex human instruction* and only the first token and the last
``max_sequence_length - 1`` tokens are kept; the negative prompt is encoded without it. Standard classifier-free
guidance; a transformer with twice the latent channels (learned sigma) gives its velocity in the first half.

Reading chosen: the published checkpoints sample with Flow-DPM-Solver (``DPMSolverMultistepScheduler`` with flow
sigmas); genalign takes its sigma schedule (``flow_shift``) and samples with its own flow SDE / Euler steps, as for
Wan's UniPC. diffusers' resolution binning (``use_resolution_binning``) is not applied: the configured size is used.
"""

from __future__ import annotations

import inspect

import torch

from genalign.pipelines.architectures.base import FLOW_ARCHITECTURES, FlowArchitecture, config_value, model_dtype


def dc_ae_scale_factor(vae_config) -> int:
    """Pixels per latent of ``AutoencoderDC``: ``2 ** (levels - 1)`` (32 for Sana's DC-AE f32c32)."""
    return 2 ** (len(config_value(vae_config, "encoder_block_out_channels")) - 1)


@FLOW_ARCHITECTURES.register(
    "sana",
    summary="Sana (SanaPipeline): DC-AE latents (32x), linear-attention DiT, Gemma-2 prompt embeddings with the complex "
    "human instruction, classifier-free guidance.",
)
class SanaArchitecture(FlowArchitecture):
    name = "sana"
    pipeline_classes = ("SanaPipeline",)
    transformer_class = "SanaTransformer2DModel"
    block_config_keys = {"blocks": "num_layers"}

    # ------------------------------------------------------------------------------ shapes from configs alone
    @classmethod
    def latent_shape(cls, transformer_config, vae_config, *, height, width, num_frames, batch):
        scale = dc_ae_scale_factor(vae_config)
        return (batch, config_value(transformer_config, "in_channels"), height // scale, width // scale)

    @classmethod
    def text_embedding_shapes(cls, transformer_config, encoder_configs, *, max_sequence_length, batch):
        return {
            "encoder_hidden_states": (
                batch, max_sequence_length, config_value(transformer_config, "caption_channels"),
            ),
            "encoder_attention_mask": (batch, max_sequence_length),
        }  # fmt: skip

    @classmethod
    def tiny_pipeline(cls, seed=0):
        """Sana with one transformer block, a two-layer Gemma-2 and a three-level DC-AE (32 px images, the least
        diffusers' pipeline accepts: 8x8 latents);
        an Euler flow-matching scheduler with Sana's shift 3, so that diffusers samples what genalign samples."""
        from diffusers import AutoencoderDC, FlowMatchEulerDiscreteScheduler, SanaPipeline, SanaTransformer2DModel
        from transformers import Gemma2Config, Gemma2Model

        from genalign.pipelines.tiny_models import word_tokenizer

        torch.manual_seed(seed)
        transformer = SanaTransformer2DModel(
            in_channels=4,
            out_channels=4,
            num_attention_heads=2,
            attention_head_dim=4,
            num_layers=1,
            num_cross_attention_heads=2,
            cross_attention_head_dim=4,
            cross_attention_dim=8,
            caption_channels=8,
            sample_size=8,
        )
        torch.manual_seed(seed)
        vae = AutoencoderDC(
            latent_channels=4,
            attention_head_dim=2,
            encoder_block_types=("ResBlock", "ResBlock", "EfficientViTBlock"),
            decoder_block_types=("ResBlock", "ResBlock", "EfficientViTBlock"),
            encoder_block_out_channels=(8, 8, 8),
            decoder_block_out_channels=(8, 8, 8),
            encoder_layers_per_block=(1, 1, 1),
            decoder_layers_per_block=(1, 1, 1),
            encoder_qkv_multiscales=((), (), (5,)),
            decoder_qkv_multiscales=((), (), (5,)),
            upsample_block_type="interpolate",
            downsample_block_type="conv",
            scaling_factor=0.41407,
        )
        tokenizer = word_tokenizer(max_length=512)
        torch.manual_seed(seed + 1)
        text_encoder = Gemma2Model(
            Gemma2Config(
                hidden_size=8,
                intermediate_size=16,
                num_hidden_layers=2,
                num_attention_heads=2,
                num_key_value_heads=1,
                head_dim=4,
                vocab_size=len(tokenizer),
                bos_token_id=0,
                eos_token_id=2,
                pad_token_id=1,
            )
        ).eval()
        return SanaPipeline(
            tokenizer=tokenizer,
            text_encoder=text_encoder,
            vae=vae,
            transformer=transformer,
            scheduler=FlowMatchEulerDiscreteScheduler(shift=3.0),
        )

    # ------------------------------------------------------------------------------ calls into a loaded pipeline
    def encode(self, pipe, prompts, *, negative_prompt, max_sequence_length, device):
        """The pipeline's own ``encode_prompt`` with the complex human instruction its ``__call__`` uses by default."""
        instruction = inspect.signature(type(pipe).__call__).parameters["complex_human_instruction"].default
        cond, cond_mask, uncond, uncond_mask = pipe.encode_prompt(
            list(prompts),
            do_classifier_free_guidance=True,
            negative_prompt=negative_prompt,
            device=device,
            max_sequence_length=max_sequence_length,
            complex_human_instruction=instruction,
        )
        return (
            {"encoder_hidden_states": cond, "encoder_attention_mask": cond_mask},
            {"encoder_hidden_states": uncond, "encoder_attention_mask": uncond_mask},
        )

    def image_seq_len(self, pipe, latents):
        patch = pipe.transformer.config.patch_size
        return (latents.shape[-2] // patch) * (latents.shape[-1] // patch)

    def velocity(self, transformer, latents, timestep, embeds, *, guidance):
        dtype = model_dtype(transformer)
        out = transformer(
            latents.to(dtype),
            encoder_hidden_states=embeds["encoder_hidden_states"].to(dtype),
            encoder_attention_mask=embeds["encoder_attention_mask"],
            timestep=timestep * transformer.config.timestep_scale,
            return_dict=False,
        )[0].float()
        if transformer.config.out_channels // 2 == latents.shape[1]:  # learned sigma: the velocity is the first half
            out = out.chunk(2, dim=1)[0]
        return out

    def decode(self, pipe, latents, *, height, width):
        vae = pipe.vae
        images = vae.decode((latents / vae.config.scaling_factor).to(vae.dtype), return_dict=False)[0]
        return pipe.image_processor.postprocess(images.float(), output_type="pil")

    def scheduler_config(self, pipe):
        config = dict(pipe.scheduler.config)
        if "flow_shift" in config:  # Flow-DPM-Solver's ``flow_shift`` is the flow sigma schedule's ``shift``
            config["shift"] = config["flow_shift"]
        return config
