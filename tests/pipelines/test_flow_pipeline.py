"""FlowLogProbPipeline: generation with log-probs on tiny SD3 / FLUX / Wan, exact re-scoring, bad inputs."""

import numpy as np
import pytest
import torch
from diffusers import DiffusionPipeline
from PIL import Image

from genalign.pipelines import FlowLogProbPipeline, NonFiniteLatentsError
from genalign.pipelines.architectures import FlowArchitecture
from genalign.pipelines.flow import denoise, guided_velocity

SIZE = {"sd3": {}, "flux": {}, "wan": {"num_frames": 5}}


@pytest.mark.parametrize("architecture", ["sd3", "flux", "wan"])
def test_generation_records_log_probs(tiny_model_dirs, architecture):
    pipe = FlowLogProbPipeline.from_pretrained(tiny_model_dirs[architecture])
    prompts = ["two red circles", "a blue square"]
    out = pipe(
        prompts,
        num_inference_steps=4,
        guidance_scale=3.0,
        height=16,
        width=16,
        max_sequence_length=8,
        record_latents=True,
        generator=torch.Generator().manual_seed(0),
        **SIZE[architecture],
    )
    assert out.log_probs.shape == (2, 4) and out.log_probs.dtype == torch.float32
    assert torch.isfinite(out.log_probs).all() and out.trajectory.stochastic.all()
    if architecture == "wan":
        assert out.outputs[0].shape == (5, 16, 16, 3) and out.outputs[0].dtype == np.uint8
    else:
        assert isinstance(out.outputs[0], Image.Image) and out.outputs[0].size == (16, 16)


def test_noise_level_zero_reproduces_plain_diffusers_sampling(tiny_model_dirs):
    ours = FlowLogProbPipeline.from_pretrained(tiny_model_dirs["sd3"])
    plain = DiffusionPipeline.from_pretrained(tiny_model_dirs["sd3"])
    plain.set_progress_bar_config(disable=True)
    latents = ours.prepare(
        1, height=16, width=16, num_frames=1, num_inference_steps=5, generator=torch.Generator().manual_seed(0)
    )
    cond, uncond = ours.encode(["two red circles"], max_sequence_length=8)
    trajectory = denoise(
        ours.arch,
        ours.pipe.transformer,
        ours.scheduler,
        latents,
        cond,
        uncond,
        guidance_scale=3.0,
        sde_mask=torch.ones(1, 5, dtype=torch.bool),
        noise_level=0.0,
        generator=None,
        record_latents=False,
    )
    expected = plain(
        "two red circles",
        num_inference_steps=5,
        guidance_scale=3.0,
        height=16,
        width=16,
        max_sequence_length=8,
        latents=latents.clone(),
        output_type="latent",
    ).images
    torch.testing.assert_close(trajectory.final, expected, atol=1e-5, rtol=1e-5)
    assert torch.all(trajectory.log_probs == 0) and not trajectory.stochastic.any()


def test_the_scheduler_is_a_drop_in_for_a_diffusers_pipeline(tiny_model_dirs):
    plain = DiffusionPipeline.from_pretrained(tiny_model_dirs["flux"])
    plain.set_progress_bar_config(disable=True)
    kwargs = dict(num_inference_steps=3, height=16, width=16, max_sequence_length=8, output_type="latent")
    expected = plain("two red circles", generator=torch.Generator().manual_seed(0), **kwargs).images
    plain.scheduler = FlowLogProbPipeline(plain, dynamics="ode").scheduler
    got = plain("two red circles", generator=torch.Generator().manual_seed(0), **kwargs).images
    torch.testing.assert_close(got, expected, atol=1e-6, rtol=0)


def test_sde_mask_makes_steps_deterministic_per_sample(tiny_model_dirs):
    pipe = FlowLogProbPipeline.from_pretrained(tiny_model_dirs["sd3"])
    mask = torch.tensor([[1, 1, 0, 0], [0, 0, 1, 1]], dtype=torch.bool)
    out = pipe(["a", "b"], num_inference_steps=4, height=8, width=8, max_sequence_length=8, sde_mask=mask)
    assert torch.equal(out.trajectory.stochastic.cpu(), mask)
    assert torch.all(out.log_probs[~mask] == 0) and torch.all(out.log_probs[mask] != 0)


def test_ab2_solver_after_the_window_changes_only_the_deterministic_tail(tiny_model_dirs):
    pipe = FlowLogProbPipeline.from_pretrained(tiny_model_dirs["sd3"])
    mask = torch.tensor([[1, 1, 0, 0, 0]], dtype=torch.bool)
    kwargs = dict(num_inference_steps=5, height=8, width=8, max_sequence_length=8, sde_mask=mask, record_latents=True)
    euler = pipe(["a"], generator=torch.Generator().manual_seed(0), **kwargs).trajectory
    ab2 = pipe(["a"], generator=torch.Generator().manual_seed(0), ode_solver="ab2", **kwargs).trajectory
    assert torch.equal(euler.latents[:, :3], ab2.latents[:, :3])  # identical until the first AB2 step (step 2)
    assert torch.equal(euler.log_probs, ab2.log_probs)
    assert not torch.equal(euler.final, ab2.final)


class _LinearArch(FlowArchitecture):
    """velocity = W x + c (c = the prompt embedding): enough to check the CFG gradient by hand."""

    name = "linear"
    uses_true_cfg = True

    def velocity(self, transformer, latents, timestep, embeds, *, guidance):
        return transformer(latents) + embeds["c"]


def test_cfg_gradient_flows_only_through_the_conditional_branch():
    layer = torch.nn.Linear(3, 3, bias=False)
    x = torch.randn(2, 3)
    v = guided_velocity(
        _LinearArch(), layer, x, torch.zeros(2), {"c": torch.ones(2, 3)}, {"c": torch.zeros(2, 3)}, guidance_scale=4.0
    )
    (grad,) = torch.autograd.grad(v.sum(), layer.weight)
    (cond_grad,) = torch.autograd.grad(layer(x).sum(), layer.weight)
    torch.testing.assert_close(grad, 4.0 * cond_grad)  # d/dW [u + s (c - u)] with u detached = s dc/dW
    torch.testing.assert_close(v, layer(x).detach() + 4.0 * torch.ones(2, 3))


def test_nan_latents_raise_naming_the_step_and_the_sample(tiny_model_dirs, monkeypatch):
    pipe = FlowLogProbPipeline.from_pretrained(tiny_model_dirs["sd3"])
    original = pipe.arch.velocity
    calls = {"n": 0}

    def poisoned(transformer, latents, timestep, embeds, *, guidance):
        out = original(transformer, latents, timestep, embeds, guidance=guidance)
        calls["n"] += 1
        if calls["n"] == 5:  # step 2, conditional branch
            out[1, 0] = float("nan")
        return out

    monkeypatch.setattr(pipe.arch, "velocity", poisoned)
    with pytest.raises(NonFiniteLatentsError, match=r"step 2 for sample\(s\) 1 \('a blue square'\)"):
        pipe(["two red circles", "a blue square"], num_inference_steps=4, height=8, width=8, max_sequence_length=8)


def test_bad_inputs_are_named(tiny_model_dirs, tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        FlowLogProbPipeline.from_pretrained(tmp_path / "missing")
    pipe = FlowLogProbPipeline.from_pretrained(tiny_model_dirs["wan"])
    with pytest.raises(ValueError, match="num_frames=4"):
        pipe(["a"], num_inference_steps=2, height=16, width=16, num_frames=4, max_sequence_length=8)
    with pytest.raises(ValueError, match="prompts must be a non-empty list"):
        pipe([], num_inference_steps=2)


def test_sd3_without_t5_encoder_pads_with_zero_tokens(tmp_path):
    from diffusers import StableDiffusion3Pipeline

    from genalign.pipelines.architectures.sd3 import SD3Architecture

    components = dict(SD3Architecture.tiny_pipeline().components) | {"text_encoder_3": None, "tokenizer_3": None}
    StableDiffusion3Pipeline(**components).save_pretrained(tmp_path / "sd3_no_t5")
    pipe = FlowLogProbPipeline.from_pretrained(tmp_path / "sd3_no_t5")
    out = pipe(
        ["two red circles"], num_inference_steps=2, height=8, width=8, max_sequence_length=1, record_latents=True
    )
    assert out.log_probs.shape == (1, 2) and torch.isfinite(out.log_probs).all()


def test_wan_unipc_flow_shift_becomes_the_flow_sigma_shift():
    from diffusers import UniPCMultistepScheduler

    from genalign.pipelines.architectures.wan import WanArchitecture

    pipe = WanArchitecture.tiny_pipeline()
    pipe.scheduler = UniPCMultistepScheduler(prediction_type="flow_prediction", use_flow_sigmas=True, flow_shift=3.0)
    assert FlowLogProbPipeline(pipe).scheduler.config.shift == 3.0
