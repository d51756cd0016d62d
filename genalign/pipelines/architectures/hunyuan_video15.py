"""HunyuanVideo 1.5 text-to-video (diffusers' ``HunyuanVideo15Pipeline``): ``HunyuanVideo15Transformer3DModel``, a
dual-stream MMDiT over video latents ``[B, C, F', h, w]`` of ``AutoencoderKLHunyuanVideo15`` (``F' = (F - 1) / 4 + 1``,
16 x 16 pixels per latent, ``C = 32``), its conventions as the pipeline calls it:

* the transformer takes ``[latents, first-frame latents, mask]`` on the channel axis (``2C + 1`` in channels); in
  text-to-video both conditions are zeros, and so are the ``[B, 729, image_embed_dim]`` SigLIP image embeddings (the
  transformer then masks those tokens out);
* two prompt embeddings with padding masks: Qwen2.5-VL's third-to-last hidden state of the chat-templated prompt after
  the 108-token system prefix (``encoder_hidden_states``), and ByT5 embeddings of the prompt's quoted text for glyph
  rendering, zeros with an all-zero mask when the prompt quotes nothing (``encoder_hidden_states_2``, 256 tokens);
* timestep ``sigma * 1000`` (the scheduler's timesteps); the sigmas ``1, 1 - 1/S, ..., 1/S`` shifted by the scheduler's
  static ``shift`` (5 at 480p, 9 at 720p); classifier-free guidance ``v_u + w (v_c - v_u)`` (the pipeline's
  ``ClassifierFreeGuidance`` guider, 6 for the published models) with the negative prompt encoded the same way;
* decoding: ``latents / scaling_factor`` through the VAE, ``[F, H, W, 3]`` uint8 frames per sample.

Reading chosen: the Qwen2.5-VL prompt is padded to ``policy.max_sequence_length`` tokens after the prefix where the
pipeline pads to 1000; padded tokens are masked out of every attention, so only the cost changes.
"""

from __future__ import annotations

import torch

from genalign.pipelines.architectures.base import (
    FLOW_ARCHITECTURES,
    FlowArchitecture,
    config_value,
    model_dtype,
    video_clips,
)

#: SigLIP tokens of the image embeddings the transformer always takes (``vision_num_semantic_tokens``).
IMAGE_TOKENS = 729
#: ByT5 tokens of the glyph prompt (the pipeline's ``tokenizer_2_max_length``).
GLYPH_TOKENS = 256
#: The conditioning keys of image-to-video: first-frame latents and mask ``[B, C + 1, F', h, w]``, SigLIP image tokens
#: ``[B, 729, image_embed_dim]`` (:mod:`genalign.pipelines.architectures.hunyuan_video15_i2v`).
SOURCE_CONDITION, IMAGE_EMBEDS = "source_condition", "source_image_embeds"


@FLOW_ARCHITECTURES.register(
    "hunyuan_video15",
    summary="HunyuanVideo 1.5 text-to-video (HunyuanVideo15Pipeline): zero first-frame channels, Qwen2.5-VL and ByT5 "
    "prompt embeddings with masks.",
)
class HunyuanVideo15Architecture(FlowArchitecture):
    name = "hunyuan_video15"
    pipeline_classes = ("HunyuanVideo15Pipeline",)
    transformer_class = "HunyuanVideo15Transformer3DModel"
    block_config_keys = {"blocks": "num_layers"}
    linear_sigmas = True
    #: the VAE's causal attention mask ``[B, S, S]`` broadcasts against its single head only for ``B = 1`` in the
    #: installed diffusers (its pipeline decodes one video per prompt): one sample per decode
    decode_batch = 1
    #: the pipeline inherits no LoRA loader: files in the format of HunyuanVideo's (``transformer.``-prefixed keys)
    lora_loader = "HunyuanVideoLoraLoaderMixin"
    lora_target_modules = ("to_q", "to_k", "to_v", "to_out.0", "add_q_proj", "add_k_proj", "add_v_proj", "to_add_out")

    # ------------------------------------------------------------------------------ shapes from configs alone
    @classmethod
    def latent_shape(cls, transformer_config, vae_config, *, height, width, num_frames, batch):
        temporal = config_value(vae_config, "temporal_compression_ratio")
        spatial = config_value(vae_config, "spatial_compression_ratio")
        frames = (num_frames - 1) // temporal + 1
        return (batch, config_value(vae_config, "latent_channels"), frames, height // spatial, width // spatial)

    @classmethod
    def text_embedding_shapes(cls, transformer_config, encoder_configs, *, max_sequence_length, batch):
        return {
            "encoder_hidden_states": (batch, max_sequence_length, config_value(transformer_config, "text_embed_dim")),
            "encoder_attention_mask": (batch, max_sequence_length),
            "encoder_hidden_states_2": (batch, GLYPH_TOKENS, config_value(transformer_config, "text_embed_2_dim")),
            "encoder_attention_mask_2": (batch, GLYPH_TOKENS),
        }

    @classmethod
    def tiny_pipeline(cls, seed=0):
        """Two transformer blocks (one refiner block) of width 16, a two-level 3D VAE with 4 latent channels (4 pixels
        and 2 frames per latent: 16 px, 5 frames give ``[4, 3, 4, 4]`` latents), a two-layer Qwen2.5-VL text model
        over a word tokenizer that splits as Qwen2's (the 108-token prefix is the real one's) and a tiny T5 as ByT5."""
        from diffusers import (
            AutoencoderKLHunyuanVideo15,
            ClassifierFreeGuidance,
            FlowMatchEulerDiscreteScheduler,
            HunyuanVideo15Pipeline,
            HunyuanVideo15Transformer3DModel,
        )
        from transformers import ByT5Tokenizer, Qwen2_5_VLTextConfig, Qwen2_5_VLTextModel

        from genalign.pipelines.tiny_models import CHAT_TEMPLATE, chat_word_tokenizer, tiny_t5

        torch.manual_seed(seed)
        transformer = HunyuanVideo15Transformer3DModel(
            in_channels=9, out_channels=4, num_attention_heads=2, attention_head_dim=8, num_layers=2,
            num_refiner_layers=1, mlp_ratio=2.0, text_embed_dim=16, text_embed_2_dim=32, image_embed_dim=12,
            rope_axes_dim=(2, 2, 4), target_size=16, task_type="t2v",
        )  # fmt: skip
        torch.manual_seed(seed)
        vae = AutoencoderKLHunyuanVideo15(
            latent_channels=4, block_out_channels=(16, 16), layers_per_block=1, spatial_compression_ratio=4,
            temporal_compression_ratio=2, downsample_match_channel=False, upsample_match_channel=False,
        )  # fmt: skip
        tokenizer = chat_word_tokenizer(chat_template=CHAT_TEMPLATE, qwen_pieces=True)
        text = Qwen2_5_VLTextConfig(
            hidden_size=16, intermediate_size=32, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=2,
            vocab_size=len(tokenizer), rope_theta=1e6, bos_token_id=0, eos_token_id=2, pad_token_id=1,
            rope_scaling={"type": "default", "rope_type": "default", "mrope_section": [1, 1, 2]},
        )  # fmt: skip
        torch.manual_seed(seed + 1)
        text_encoder = Qwen2_5_VLTextModel(text).eval()
        return HunyuanVideo15Pipeline(
            transformer=transformer,
            vae=vae,
            scheduler=FlowMatchEulerDiscreteScheduler(shift=5.0),
            text_encoder=text_encoder,
            tokenizer=tokenizer,
            text_encoder_2=tiny_t5(32, umt5=False, seed=seed + 2, vocab_size=len(ByT5Tokenizer())),
            tokenizer_2=ByT5Tokenizer(),
            guider=ClassifierFreeGuidance(guidance_scale=6.0),
        )

    # ------------------------------------------------------------------------------ calls into a loaded pipeline
    def encode(self, pipe, prompts, *, negative_prompt, max_sequence_length, device):
        def embeddings(texts: list[str]) -> dict[str, torch.Tensor]:
            text, text_mask = pipe._get_mllm_prompt_embeds(
                text_encoder=pipe.text_encoder, tokenizer=pipe.tokenizer, prompt=texts, device=device,
                tokenizer_max_length=max_sequence_length, system_message=pipe.system_message,
                crop_start=pipe.prompt_template_encode_start_idx,
            )  # fmt: skip
            glyph, glyph_mask = pipe._get_byt5_prompt_embeds(
                tokenizer=pipe.tokenizer_2, text_encoder=pipe.text_encoder_2, prompt=texts, device=device,
                tokenizer_max_length=pipe.tokenizer_2_max_length,
            )  # fmt: skip
            return {"encoder_hidden_states": text, "encoder_attention_mask": text_mask,
                    "encoder_hidden_states_2": glyph, "encoder_attention_mask_2": glyph_mask}  # fmt: skip

        return embeddings(list(prompts)), embeddings([negative_prompt] * len(prompts))

    def initial_latents(self, pipe, batch_size, *, height, width, num_frames, generator):
        temporal = pipe.vae.config.temporal_compression_ratio
        if (num_frames - 1) % temporal != 0:
            raise ValueError(
                f"policy.num_frames={num_frames} must be 1 + a multiple of {temporal} for HunyuanVideo 1.5 (its VAE "
                f"packs {temporal} frames per latent after the first); use e.g. {1 + temporal * max(1, num_frames // temporal)}."
            )
        return super().initial_latents(
            pipe, batch_size, height=height, width=width, num_frames=num_frames, generator=generator
        )

    def image_seq_len(self, pipe, latents):
        _, _, frames, h, w = latents.shape
        config = pipe.transformer.config
        return (frames // config.patch_size_t) * (h // config.patch_size) * (w // config.patch_size)

    def velocity(self, transformer, latents, timestep, embeds, *, guidance):
        dtype = model_dtype(transformer)
        batch, channels, frames, height, width = latents.shape
        condition = embeds.get(SOURCE_CONDITION)
        if condition is None:  # text-to-video: no first-frame latents, mask 0
            condition = latents.new_zeros(batch, channels + 1, frames, height, width)
        image_embeds = embeds.get(IMAGE_EMBEDS)
        if image_embeds is None:  # text-to-video: zero image tokens, which the transformer masks out
            image_embeds = latents.new_zeros(batch, IMAGE_TOKENS, transformer.config.image_embed_dim)
        out = transformer(
            hidden_states=torch.cat([latents, condition], dim=1).to(dtype),
            image_embeds=image_embeds.to(dtype),
            timestep=timestep.to(dtype),
            encoder_hidden_states=embeds["encoder_hidden_states"].to(dtype),
            encoder_attention_mask=embeds["encoder_attention_mask"].to(dtype),
            encoder_hidden_states_2=embeds["encoder_hidden_states_2"].to(dtype),
            encoder_attention_mask_2=embeds["encoder_attention_mask_2"].to(dtype),
            return_dict=False,
        )[0]
        return out.float()

    def decode(self, pipe, latents, *, height, width):
        vae = pipe.vae
        scaled = (latents / vae.config.scaling_factor).to(vae.dtype)
        calls = scaled.split(self.decode_batch)
        return [clip for part in calls for clip in video_clips(vae.decode(part, return_dict=False)[0])]
