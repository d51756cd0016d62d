"""The conventions each flow architecture takes from its diffusers pipeline, against hand-computed values and against
the pipeline's own static helpers: Qwen-Image's norm-preserving guidance and token packing, FLUX.2's step-dependent
schedule shift and patchified tokens; and the error an unsupported pipeline class gets."""

import math
from types import SimpleNamespace

import pytest
import torch

from genalign.pipelines.architectures import FLOW_ARCHITECTURES, architecture_name
from genalign.pipelines.architectures.flux2 import Flux2Architecture, empirical_mu, position_ids
from genalign.pipelines.architectures.qwen_image import QwenImageArchitecture, norm_preserving_guidance
from genalign.pipelines.architectures.sana import SanaArchitecture


def test_qwen_image_guidance_keeps_the_norm_of_the_conditional_velocity():
    v_cond = torch.tensor([[[3.0, 4.0], [1.0, 0.0]]])  # [B=1, tokens=2, channels=2]
    v_uncond = torch.tensor([[[0.0, 0.0], [0.0, 1.0]]])
    guided = norm_preserving_guidance(v_cond, v_uncond, 3.0)
    # token 0: 3 x (3, 4) = (9, 12), norm 15, rescaled to norm 5: (3, 4)
    # token 1: (0, 1) + 3 x (1, -1) = (3, -2), norm sqrt(13), rescaled to norm 1
    expected = torch.tensor([[[3.0, 4.0], [3 / math.sqrt(13), -2 / math.sqrt(13)]]])
    torch.testing.assert_close(guided, expected)
    assert QwenImageArchitecture().combine_guidance(v_cond, v_uncond, 3.0).equal(guided)
    plain = FLOW_ARCHITECTURES.get("sd3")().combine_guidance(v_cond, v_uncond, 3.0)
    torch.testing.assert_close(plain, torch.tensor([[[9.0, 12.0], [3.0, -2.0]]]))  # the default rule, unchanged


def test_flux2_schedule_shift_depends_on_tokens_and_steps():
    # 4096 tokens: at 200 steps 0.00016927 x 4096 + 0.45666666 = 1.14999658, at 10 steps 8.73809524e-05 x 4096 +
    # 1.89833333 = 2.25624571; 50 steps lie 150/190 of the way from 200 to 10: 2.02335116
    assert empirical_mu(4096, 50) == pytest.approx(2.02335116, abs=1e-7)
    assert empirical_mu(4096, 200) == pytest.approx(1.14999658, abs=1e-7)
    assert empirical_mu(4096, 10) == pytest.approx(2.25624571, abs=1e-7)
    assert empirical_mu(8192, 50) == empirical_mu(8192, 4) == pytest.approx(1.8433265, abs=1e-7)  # > 4300: one line


def test_qwen_image_tokens_unpack_to_the_layout_the_pipeline_packs():
    from diffusers import QwenImagePipeline

    vae_config = {"temperal_downsample": [False, True, True]}  # 8 px per latent
    video = torch.randn(2, 16, 1, 6, 10)  # [B, C, 1, h, w] of a 48 x 80 image
    tokens = QwenImagePipeline._pack_latents(video, 2, 16, 6, 10)  # [B, 3 * 5, 64]
    unpacked = QwenImageArchitecture.latents_for_decode(tokens, vae_config, height=48, width=80)
    assert unpacked.equal(video)


def test_flux2_tokens_unpack_to_the_layout_the_pipeline_patchifies_and_ids_match_it():
    from diffusers import Flux2Pipeline

    vae_config = {"block_out_channels": [128, 256, 512, 512]}  # 8 px per latent
    latents = torch.randn(2, 4, 6, 10)  # [B, C, h, w] of a 48 x 80 image
    grid = Flux2Pipeline._patchify_latents(latents)  # [B, 16, 3, 5]
    tokens = Flux2Pipeline._pack_latents(grid)  # [B, 15, 16]
    assert Flux2Architecture.latents_for_decode(tokens, vae_config, height=48, width=80).equal(latents)
    image_ids, text_ids = position_ids(3, 5, 7, 2, torch.device("cpu"))
    assert image_ids.equal(Flux2Pipeline._prepare_latent_ids(grid).float())
    assert text_ids.equal(Flux2Pipeline._prepare_text_ids(torch.zeros(2, 7, 1)).float())


def test_a_step_distilled_flux2_klein_has_no_unconditional_branch():
    from diffusers import Flux2KleinPipeline

    base = FLOW_ARCHITECTURES.get("flux2_klein")
    pipe = base.tiny_pipeline(0)
    distilled = Flux2KleinPipeline(**pipe.components, is_distilled=True)
    for candidate, has_uncond in ((pipe, True), (distilled, False)):
        cond, uncond = base().encode(candidate, ["a red circle"], negative_prompt="", max_sequence_length=12,
                                     device=torch.device("cpu"))  # fmt: skip
        assert cond["encoder_hidden_states"].shape[:2] == (1, 12) and (uncond is not None) == has_uncond


class _RecordingTransformer(torch.nn.Module):
    """Returns channels ``0 .. out_channels - 1`` as constant planes and records the timestep it was given."""

    def __init__(self, out_channels: int, timestep_scale: float) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.zeros(1))
        self.config = SimpleNamespace(out_channels=out_channels, timestep_scale=timestep_scale)

    def forward(self, latents, *, encoder_hidden_states, encoder_attention_mask, timestep, return_dict):
        self.timestep = timestep
        batch, _, h, w = latents.shape
        planes = torch.arange(self.config.out_channels, dtype=torch.float32).view(1, -1, 1, 1)
        return (planes.expand(batch, -1, h, w),)


def test_sana_scales_the_timestep_and_keeps_the_first_half_of_a_learned_sigma_output():
    embeds = {"encoder_hidden_states": torch.zeros(2, 3, 8), "encoder_attention_mask": torch.ones(2, 3)}
    latents = torch.zeros(2, 4, 2, 2)
    learned_sigma = _RecordingTransformer(out_channels=8, timestep_scale=0.5)
    velocity = SanaArchitecture().velocity(learned_sigma, latents, torch.tensor([500.0, 250.0]), embeds, guidance=1.0)
    assert learned_sigma.timestep.tolist() == [250.0, 125.0]  # sigma x 1000 x timestep_scale
    assert velocity.shape == latents.shape and velocity[:, :, 0, 0].tolist() == [[0.0, 1.0, 2.0, 3.0]] * 2
    plain = _RecordingTransformer(out_channels=4, timestep_scale=1.0)
    assert SanaArchitecture().velocity(plain, latents, torch.tensor([500.0, 250.0]), embeds, guidance=1.0).shape == (
        2, 4, 2, 2,
    )  # fmt: skip


def test_an_unsupported_pipeline_class_is_named_with_the_supported_list():
    served = [c for n in FLOW_ARCHITECTURES.names() for c in FLOW_ARCHITECTURES.get(n).pipeline_classes]
    assert {
        "QwenImagePipeline",
        "Flux2Pipeline",
        "Flux2KleinPipeline",
        "SanaPipeline",
        "StableDiffusion3Pipeline",
    } <= set(served)
    with pytest.raises(ValueError) as error:
        architecture_name("auto", "StableDiffusionXLPipeline")
    message = str(error.value)
    assert message.startswith(
        "pipeline class 'StableDiffusionXLPipeline' is not a supported flow-matching pipeline; supported: "
    )
    assert all(name in message for name in served)
    assert "Set policy.architecture to one of " + ", ".join(FLOW_ARCHITECTURES.names()) in message
