"""Wan2.2: the two experts of A14B each denoise their own timesteps (diffusers' switch at boundary_ratio x 1000),
``auto`` tells Wan2.1, Wan2.2 A14B and TI2V-5B apart by their config, and TI2V-5B gets per-token timesteps."""

from __future__ import annotations

import pytest
import torch

from genalign.pipelines.architectures import FLOW_ARCHITECTURES, architecture_for, architecture_name
from genalign.pipelines.timestep_experts import TimestepExperts


@pytest.fixture(scope="module")
def pipes():
    torch.set_num_threads(1)
    return {name: FLOW_ARCHITECTURES.get(name).tiny_pipeline(0) for name in ("wan", "wan22", "wan22_ti2v")}


def _inputs(batch: int, channels: int = 16, side: int = 4):
    generator = torch.Generator().manual_seed(0)
    latents = torch.randn(batch, channels, 2, side, side, generator=generator)
    text = torch.randn(batch, 6, 32, generator=generator)
    return latents, text


def test_each_sample_goes_to_the_expert_of_its_timestep(pipes):
    pipe = pipes["wan22"]
    experts = TimestepExperts(pipe.transformer, pipe.transformer_2, boundary=900.0)
    latents, text = _inputs(3)
    timestep = torch.tensor([1000.0, 899.0, 900.0])  # high, low, high (the boundary is the high expert's)
    with torch.no_grad():
        mixed = experts(hidden_states=latents, timestep=timestep, encoder_hidden_states=text)[0]
        for row, expert in enumerate([pipe.transformer, pipe.transformer_2, pipe.transformer]):
            alone = expert(hidden_states=latents[row : row + 1], timestep=timestep[row : row + 1],
                           encoder_hidden_states=text[row : row + 1], return_dict=False)[0]  # fmt: skip
            torch.testing.assert_close(mixed[row : row + 1], alone, rtol=0, atol=1e-6)
        whole = experts(hidden_states=latents, timestep=torch.full((3,), 899.0), encoder_hidden_states=text)[0]
        low = pipe.transformer_2(hidden_states=latents, timestep=torch.full((3,), 899.0),
                                 encoder_hidden_states=text, return_dict=False)[0]  # fmt: skip
    assert torch.equal(whole, low)  # a batch of one range is one call of its expert, bit for bit


def test_the_architecture_reads_the_boundary_from_the_pipeline_and_trains_both_experts(pipes):
    pipe = pipes["wan22"]
    arch = architecture_for(pipe)
    experts = arch.denoiser(pipe)
    assert type(arch).__name__ == "Wan22Architecture" and experts.boundary == 0.9 * 1000
    assert arch.trained_components(experts) == {"transformer": pipe.transformer, "transformer_2": pipe.transformer_2}


def test_auto_picks_by_the_pipeline_config_and_a_wrong_name_says_which_to_use(pipes):
    for name, pipe in pipes.items():
        assert architecture_name("auto", "WanPipeline", dict(pipe.config)) == name
    with pytest.raises(ValueError, match=r"is a Wan2.2 model .* Use policy.architecture: wan22 \(or auto\)"):
        architecture_for(pipes["wan22"], "wan")
    with pytest.raises(ValueError, match=r"Use policy.architecture: wan22_ti2v \(or auto\)"):
        architecture_for(pipes["wan22_ti2v"], "wan")
    with pytest.raises(ValueError, match=r"architecture=wan22 needs a Wan2.2 A14B pipeline"):
        architecture_for(pipes["wan"], "wan22")
    with pytest.raises(ValueError, match=r"architecture=wan22_ti2v needs a Wan2.2 TI2V-5B pipeline"):
        architecture_for(pipes["wan22"], "wan22_ti2v")
    with pytest.raises(ValueError, match=r"'CogVideoXPipeline' is not a supported flow-matching pipeline") as err:
        architecture_name("auto", "CogVideoXPipeline", {})
    assert str(err.value).count("WanPipeline") == 1  # three architectures, one pipeline class, named once
    with pytest.raises(ValueError, match=r"'LTX2Pipeline' is not a supported flow-matching pipeline \(LTX-2 denoises "
                       r"video and audio latents jointly .*\); supported: .*HunyuanVideo15Pipeline"):  # fmt: skip
        architecture_name("auto", "LTX2Pipeline", {})


def test_ti2v_gives_every_latent_token_the_step_timestep(pipes):
    pipe = pipes["wan22_ti2v"]
    arch = architecture_for(pipe)
    latents, text = _inputs(2, channels=48)  # [2, 48, 2, 4, 4] with patches (1, 2, 2): 2 x 2 x 2 = 8 tokens
    timestep = torch.tensor([700.0, 300.0])
    tokens = arch.token_timesteps(pipe.transformer.config, latents, timestep)
    assert torch.equal(tokens, torch.tensor([[700.0] * 8, [300.0] * 8]))
    with torch.no_grad():
        per_token = arch.velocity(pipe.transformer, latents, timestep, {"encoder_hidden_states": text}, guidance=1.0)
        per_sample = pipe.transformer(hidden_states=latents, timestep=timestep, encoder_hidden_states=text,
                                      return_dict=False)[0]  # fmt: skip
    torch.testing.assert_close(per_token, per_sample, rtol=0, atol=1e-5)  # the same function, another layout


@pytest.mark.parametrize(
    ("hub_id", "architecture", "billions"),
    [("Wan-AI/Wan2.2-T2V-A14B-Diffusers", "wan22", 14.0), ("Wan-AI/Wan2.2-TI2V-5B-Diffusers", "wan22_ti2v", 5.0)],
)
def test_published_wan22_models_plan_as_their_architecture_at_their_model_card_size(hub_id, architecture, billions):
    """The planner's tables: ``auto`` reads the pipeline config, and each transformer (each expert of A14B: 27B in
    all, 14B active per step) has the model card's size on the meta device."""
    from genalign.planning.architectures import published_model
    from genalign.planning.meta_models import build_on_meta, count_parameters

    published = published_model(hub_id)
    assert architecture_name("auto", published.pipeline_class, published.pipeline_config) == architecture
    experts = [role for role in published.components if role.startswith("transformer")]
    assert experts == (["transformer", "transformer_2"] if architecture == "wan22" else ["transformer"])
    total = count_parameters(build_on_meta(published.components["transformer"], torch.bfloat16)).total
    assert abs(total / 1e9 - billions) / billions < 0.03, total
