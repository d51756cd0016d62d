"""HunyuanVideo 1.5 text-to-video and image-to-video on their tiny pipelines: the prompt embeddings keep exactly the
prompt's tokens after the 108-token system prefix, ByT5 sees only quoted text, the first frame conditions latent frame
0, and the exported LoRA loads into diffusers' plain ``HunyuanVideo15Pipeline`` / ``HunyuanVideo15ImageToVideoPipeline``
(through the transformer: the pipeline classes have no LoRA loader), which sample genalign's video for the same
seed."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image

from genalign.pipelines.architectures import architecture_for

CPU = torch.device("cpu")


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    from genalign.pipelines.tiny_models import save_tiny_pipeline

    torch.set_num_threads(1)
    return save_tiny_pipeline("hunyuan_video15", tmp_path_factory.mktemp("hv15") / "base")


@pytest.fixture(scope="module")
def pipe(base):
    from diffusers import DiffusionPipeline

    pipe = DiffusionPipeline.from_pretrained(base)
    pipe.set_progress_bar_config(disable=True)
    return pipe


def test_auto_picks_it_and_the_prompt_keeps_its_tokens_after_the_108_token_prefix(pipe):
    arch = architecture_for(pipe)
    assert arch.name == "hunyuan_video15" and pipe.prompt_template_encode_start_idx == 108
    cond, uncond = arch.encode(pipe, ["two red circles", "a dog"], negative_prompt="", max_sequence_length=16,
                               device=CPU)  # fmt: skip
    # "two red circles" + the template's tail "<|im_end|>", "\n", "<|im_start|>", "assistant", "\n": 3 + 5 tokens
    assert cond["encoder_attention_mask"].sum(1).tolist() == [8, 7]
    assert uncond["encoder_attention_mask"].sum(1).tolist() == [6, 6]  # the empty prompt is written " " (one piece)
    assert cond["encoder_hidden_states"].shape == (2, 16, 16)


def test_byt5_encodes_only_quoted_text(pipe):
    arch = architecture_for(pipe)
    cond, _ = arch.encode(pipe, ['a sign "hi"', "a dog"], negative_prompt="", max_sequence_length=8, device=CPU)
    # 'Text "hi". ' is 11 bytes, plus ByT5's end token; no quote: zeros and an empty mask
    assert cond["encoder_attention_mask_2"].sum(1).tolist() == [12, 0]
    assert cond["encoder_hidden_states_2"][1].abs().sum() == 0 and cond["encoder_hidden_states_2"][0].abs().sum() > 0


def test_text_to_video_conditions_are_zero_channels(pipe):
    """The transformer takes ``[latents, first-frame latents, mask]``: ``4 + 4 + 1`` channels of the tiny model, the
    last five zero in text-to-video, exactly as the pipeline concatenates them."""
    arch = architecture_for(pipe)
    cond, _ = arch.encode(pipe, ["two red circles"], negative_prompt="", max_sequence_length=8, device=CPU)
    latents = torch.randn(1, 4, 3, 4, 4, generator=torch.Generator().manual_seed(0))
    timestep = torch.tensor([700.0])
    with torch.no_grad():
        ours = arch.velocity(pipe.transformer, latents, timestep, cond, guidance=1.0)
        theirs = pipe.transformer(
            hidden_states=torch.cat([latents, torch.zeros(1, 5, 3, 4, 4)], dim=1), timestep=timestep,
            image_embeds=torch.zeros(1, 729, 12), return_dict=False, **cond,
        )[0]  # fmt: skip
    assert torch.equal(ours, theirs)


def test_exported_lora_reproduces_genalign_video_in_plain_diffusers(base, pipe, tmp_path):
    from diffusers.loaders import HunyuanVideoLoraLoaderMixin

    from genalign.export.flow import write_flow
    from genalign.policies.flow import FlowPolicyConfig, flow_lora
    from genalign.policies.flow import build_policy as build_flow_policy

    length, frames = 8, 5
    policy = build_flow_policy(FlowPolicyConfig(model=str(base), architecture="auto", height=16, width=16,
                                                num_frames=frames, max_sequence_length=length,
                                                lora=flow_lora(rank=4, alpha=8.0)))  # fmt: skip
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():  # trained-looking adapters
        for param in policy.trainable_parameters():
            param.add_(0.3 * torch.randn(param.shape, generator=generator))
    write_flow(policy, tmp_path / "export", merge_lora=False, dtype=None)
    assert 'transformer.load_lora_adapter(folder, prefix="transformer")' in (tmp_path / "export/README.md").read_text()

    prompts, guidance = ["two red circles", "a blue square"], 2.0
    ours = policy.model.sampler(prompts, guidance_scale=guidance, noise_level=0.0, num_inference_steps=2, height=16,
                                width=16, num_frames=frames, max_sequence_length=length,
                                generator=torch.Generator().manual_seed(7))  # fmt: skip
    ours_pixels = np.stack([np.asarray(video, dtype=np.float32) for video in ours.outputs])  # [B, F, H, W, 3]

    state, metadata = HunyuanVideoLoraLoaderMixin.lora_state_dict(tmp_path / "export", return_lora_metadata=True)
    pipe.transformer.load_lora_adapter(state, prefix="transformer", metadata=metadata, adapter_name="genalign")
    pipe.guider = pipe.guider.new(guidance_scale=guidance)
    pipe.tokenizer_max_length = length  # genalign pads the prompt to policy.max_sequence_length tokens
    pipe.vae.enable_slicing()  # the VAE decodes one video per call (its attention mask broadcasts for one)
    settings = dict(num_inference_steps=2, height=16, width=16, num_frames=frames, output_type="np")
    try:
        theirs = pipe(prompt=prompts, generator=torch.Generator().manual_seed(7), **settings).frames * 255.0
        pipe.transformer.delete_adapters("genalign")
        untrained = pipe(prompt=prompts, generator=torch.Generator().manual_seed(7), **settings).frames * 255.0
    finally:
        pipe.tokenizer_max_length = 1000
    assert theirs.shape == ours_pixels.shape == (2, frames, 16, 16, 3)
    assert np.abs(theirs - ours_pixels).max() <= 1.0
    assert np.abs(untrained - ours_pixels).max() > 2.0, "the LoRA must change the samples"


# ---- image-to-video -----------------------------------------------------------------------------------------------------
SOURCE = Image.fromarray(np.random.default_rng(0).integers(0, 256, (32, 32, 3), dtype=np.uint8))  # resized to 16 px


@pytest.fixture(scope="module")
def i2v_base(tmp_path_factory):
    from genalign.pipelines.tiny_models import save_tiny_pipeline

    return save_tiny_pipeline("hunyuan_video15_i2v", tmp_path_factory.mktemp("hv15_i2v") / "base")


def test_the_first_frame_conditions_frame_0_and_the_planner_shapes_are_those_made(i2v_base):
    from diffusers import DiffusionPipeline

    pipe = DiffusionPipeline.from_pretrained(i2v_base)
    arch = architecture_for(pipe)
    assert arch.name == "hunyuan_video15_i2v" and arch.source_role == "first_frame"
    made = arch.encode_sources(pipe, [SOURCE] * 2, height=16, width=16, num_frames=5, device=CPU)
    planned = arch.source_shapes(pipe.transformer.config, pipe.vae.config, height=16, width=16, num_frames=5, batch=2)
    assert planned == {key: tuple(value.shape) for key, value in made.items()}
    condition = made["source_condition"]  # [2, 4 + 1, 3, 4, 4]: first-frame latents, then the mask
    assert condition[:, :4, 0].abs().sum() > 0 and condition[:, :4, 1:].abs().sum() == 0
    assert torch.equal(condition[:, 4, 0], torch.ones(2, 4, 4)) and condition[:, 4, 1:].abs().sum() == 0
    assert made["source_image_embeds"].shape == (2, 729, 12) and made["source_image_embeds"].abs().sum() > 0


def test_image_to_video_lora_reproduces_genalign_latents_in_plain_diffusers(i2v_base, tmp_path):
    from diffusers import DiffusionPipeline
    from diffusers.loaders import HunyuanVideoLoraLoaderMixin

    from genalign.export.flow import write_flow
    from genalign.policies.flow import FlowPolicyConfig, flow_lora
    from genalign.policies.flow import build_policy as build_flow_policy

    length, frames, guidance = 8, 5, 3.0
    policy = build_flow_policy(FlowPolicyConfig(model=str(i2v_base), architecture="auto", height=16, width=16,
                                                num_frames=frames, max_sequence_length=length,
                                                lora=flow_lora(rank=4, alpha=8.0)))  # fmt: skip
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for param in policy.trainable_parameters():
            param.add_(0.3 * torch.randn(param.shape, generator=generator))
    write_flow(policy, tmp_path / "export", merge_lora=False, dtype=None)
    ours = policy.model.sampler(["a red circle"], source_images=[SOURCE], guidance_scale=guidance, noise_level=0.0,
                                num_inference_steps=2, height=16, width=16, num_frames=frames,
                                max_sequence_length=length, generator=torch.Generator().manual_seed(7))  # fmt: skip

    pipe = DiffusionPipeline.from_pretrained(i2v_base)
    pipe.set_progress_bar_config(disable=True)
    state, metadata = HunyuanVideoLoraLoaderMixin.lora_state_dict(tmp_path / "export", return_lora_metadata=True)
    pipe.transformer.load_lora_adapter(state, prefix="transformer", metadata=metadata, adapter_name="genalign")
    pipe.guider = pipe.guider.new(guidance_scale=guidance)
    pipe.tokenizer_max_length = length
    settings = dict(image=SOURCE, prompt=["a red circle"], num_frames=frames, num_inference_steps=2,
                    output_type="latent")  # fmt: skip
    theirs = pipe(generator=torch.Generator().manual_seed(7), **settings).frames
    torch.testing.assert_close(theirs, ours.trajectory.final, rtol=0, atol=1e-5)
    pipe.transformer.delete_adapters("genalign")
    untrained = pipe(generator=torch.Generator().manual_seed(7), **settings).frames
    assert (untrained - ours.trajectory.final).abs().max() > 1e-3, "the LoRA must change the sample"
