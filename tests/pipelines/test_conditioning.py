"""Source-image conditioning of the flow family: image-to-image (``sd3_img2img``), editing (``flux_kontext``,
``qwen_image_edit``, FLUX.2 with a reference: ``flux2_edit`` / ``flux2_klein_edit``) and image-to-video
(``wan_i2v``). Each mode's exported LoRA loads into the plain diffusers pipeline of that mode and reproduces
genalign's ODE sample (bit for bit, or to float rounding where noted); the image-to-image schedule and start state are
checked against hand-computed values; the conditioning the planner assumes is the conditioning the architecture makes;
rollouts store the conditioning, so re-scoring does not read the rows' images again."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np
import pytest
import torch
from PIL import Image

from genalign.data.images import ImageLoadError
from genalign.pipelines.architectures import FLOW_ARCHITECTURES
from genalign.pipelines.flow import FlowLogProbPipeline, skipped_steps
from genalign.policies.flow import FlowPolicyConfig, flow_lora
from genalign.policies.flow import build_policy as build_flow_policy
from genalign.policies.flow.config import TreeRolloutConfig

torch.set_num_threads(1)
SOURCE = Image.fromarray(np.random.default_rng(0).integers(0, 256, (16, 16, 3), dtype=np.uint8))
PROMPTS = ["make the red circle blue", "add a green square"]
#: architecture -> (policy options, diffusers __call__ options beyond the shared ones)
MODES = {
    "sd3_img2img": ({"strength": 0.6, "guidance_scale": 1.0}, {"strength": 0.6}),
    "flux_kontext": ({"guidance_scale": 3.5}, {"_auto_resize": False, "max_area": 16 * 16}),
    "wan_i2v": ({"guidance_scale": 3.0, "num_frames": 5}, {"num_frames": 5}),
}


@pytest.fixture(scope="module")
def model_dirs(tmp_path_factory):
    from genalign.pipelines.tiny_models import save_tiny_pipeline

    root = tmp_path_factory.mktemp("conditioned_flow")
    return {name: save_tiny_pipeline(name, root / name) for name in MODES}


def _policy(model_dir, name):
    options, _ = MODES[name]
    config = FlowPolicyConfig(model=str(model_dir), architecture=name, height=16, width=16, num_steps=4,
                              eval_num_steps=4, max_sequence_length=8, lora=flow_lora(rank=4, alpha=16.0),
                              **options)  # fmt: skip
    policy = build_flow_policy(config)
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():  # trained-looking adapters: B != 0
        for param in policy.trainable_parameters():
            param.add_(0.2 * torch.randn(param.shape, generator=generator))
    return policy


@pytest.mark.parametrize("name", list(MODES))
def test_the_exported_lora_loads_into_the_plain_diffusers_pipeline_and_reproduces_the_sample(
    name, model_dirs, tmp_path
):
    from diffusers import DiffusionPipeline

    from genalign.export.flow import write_flow

    policy = _policy(model_dirs[name], name)
    options, call_options = MODES[name]
    write_flow(policy, tmp_path / "export", merge_lora=False, dtype=None)
    pipe = DiffusionPipeline.from_pretrained(model_dirs[name])
    assert type(pipe).__name__ in FLOW_ARCHITECTURES.get(name).pipeline_classes
    pipe.set_progress_bar_config(disable=True)
    pipe.load_lora_weights(tmp_path / "export")
    sources = [SOURCE, SOURCE.transpose(Image.Transpose.FLIP_LEFT_RIGHT)]
    settings = dict(num_inference_steps=4, guidance_scale=options["guidance_scale"], height=16, width=16,
                    max_sequence_length=8)  # fmt: skip
    frames = {"num_frames": options["num_frames"]} if "num_frames" in options else {}
    for prompt, source in zip(PROMPTS, sources):
        ours = policy.model.sampler([prompt], source_images=[source], noise_level=0.0,
                                    generator=torch.Generator().manual_seed(7), **settings, **frames)  # fmt: skip
        image = source
        if name == "sd3_img2img":  # diffusers samples the VAE posterior; genalign takes its mode (the latents given)
            image = policy.model.sampler.encode_sources([source], height=16, width=16, num_frames=1)["source_latents"]
        theirs = pipe(prompt=[prompt], image=image, generator=torch.Generator().manual_seed(7), output_type="latent",
                      **settings, **call_options)  # fmt: skip
        latents = theirs.images if hasattr(theirs, "images") else theirs.frames
        assert torch.equal(latents, ours.trajectory.final), name
    base = DiffusionPipeline.from_pretrained(model_dirs[name])
    base.set_progress_bar_config(disable=True)
    plain = base(prompt=[prompt], image=image, generator=torch.Generator().manual_seed(7), output_type="latent",
                 **settings, **call_options)  # fmt: skip
    plain = plain.images if hasattr(plain, "images") else plain.frames
    assert (plain - ours.trajectory.final).abs().max() > 1e-3, "the LoRA must change the sample"


def test_image_to_image_skips_the_first_steps_and_starts_from_the_noised_source(model_dirs):
    """diffusers' get_timesteps: S=10, strength 0.75 -> init 7.5, t_start = int(2.5) = 2; strength 1 skips none."""
    assert [skipped_steps(10, s) for s in (1.0, 0.75, 0.5, 0.05)] == [0, 2, 5, 9]
    with pytest.raises(ValueError, match="leaves no denoising step"):
        skipped_steps(4, 0.0)
    from diffusers import DiffusionPipeline

    pipe = DiffusionPipeline.from_pretrained(model_dirs["sd3_img2img"])
    sampler = FlowLogProbPipeline(pipe, strength=0.75)
    out = sampler(["a red circle"], num_inference_steps=8, guidance_scale=1.0, height=16, width=16,
                  max_sequence_length=8, noise_level=0.0, source_images=[SOURCE], record_latents=True,
                  generator=torch.Generator().manual_seed(3))  # fmt: skip
    full = FlowLogProbPipeline(pipe)
    full.set_schedule(8, out.trajectory.latents[:, 0])
    assert torch.equal(sampler.scheduler.sigmas, full.scheduler.sigmas[2:]) and out.log_probs.shape == (1, 6)
    source = sampler.encode_sources([SOURCE], height=16, width=16, num_frames=1)["source_latents"]
    noise = torch.randn(source.shape, generator=torch.Generator().manual_seed(3))
    sigma = float(full.scheduler.sigmas[2])
    torch.testing.assert_close(out.trajectory.latents[:, 0], sigma * noise + (1 - sigma) * source, rtol=0, atol=1e-6)


@pytest.mark.parametrize("name", list(MODES))
def test_the_planner_shapes_of_the_source_conditioning_are_those_the_architecture_makes(name):
    arch = FLOW_ARCHITECTURES.get(name)
    pipe = arch.tiny_pipeline(0)
    frames = MODES[name][0].get("num_frames", 1)
    made = arch().encode_sources(pipe, [SOURCE] * 3, height=16, width=16, num_frames=frames, device=torch.device("cpu"))
    planned = arch.source_shapes(pipe.transformer.config, pipe.vae.config, height=16, width=16, num_frames=frames,
                                 batch=3)  # fmt: skip
    assert planned == {key: tuple(value.shape) for key, value in made.items()} and arch.source_role is not None


def test_rollouts_store_the_conditioning_and_scores_do_not_read_the_rows_again(model_dirs):
    policy = _policy(model_dirs["flux_kontext"], "flux_kontext")
    rows = [{"prompt": p, "image": s} for p, s in zip(PROMPTS, [SOURCE, SOURCE.rotate(90)])]
    rollout = policy.rollout(rows, 2)
    stored = rollout.per_sample["source.source_tokens"]  # [4, 64, 4]: one per sample, group members alike
    assert stored.shape == (4, 64, 4) and torch.equal(stored[0], stored[1]) and not torch.equal(stored[1], stored[2])
    for row in rows:
        row["image"] = Image.new("RGB", (16, 16))  # the score must not see this
    assert torch.equal(policy.score(rollout).logp, rollout.old_logp)


def test_a_row_without_its_source_image_and_a_text_only_architecture_name_the_fix(model_dirs, tmp_path):
    policy = _policy(model_dirs["wan_i2v"], "wan_i2v")
    with pytest.raises(ImageLoadError, match=r"row 0 has no source image in column 'image'.*policy.source_column"):
        policy.rollout([{"prompt": "a red circle", "picture": SOURCE}], 1)
    with pytest.raises(
        ValueError,
        match=r"'sd3' takes no source images.*\(flux2_edit, flux2_klein_edit, flux_kontext, hunyuan_video15_i2v, "
        r"qwen_image_edit, sd3_img2img, wan22_ti2v_i2v, wan_i2v\)",
    ):
        FLOW_ARCHITECTURES.get("sd3")().encode_sources(None, [SOURCE], height=16, width=16, num_frames=1,
                                                       device=torch.device("cpu"))  # fmt: skip
    with pytest.raises(ValueError, match=r"strength=0.5 applies to image-to-image architectures only"):
        FlowLogProbPipeline(FLOW_ARCHITECTURES.get("flux_kontext").tiny_pipeline(0), strength=0.5)
    with pytest.raises(ValueError, match=r"policy.strength=0.5 .*tree rollouts"):
        tree = TreeRolloutConfig(enabled=True, split_steps=[0])
        FlowPolicyConfig(model=str(tmp_path), strength=0.5, tree=tree).validate()


# ---- Qwen-Image-Edit: the source as extra tokens and in the VL prompt encoder -----------------------------------------
EDIT_SETTINGS = dict(num_inference_steps=3, height=16, width=16)


@pytest.fixture(scope="module")
def qwen_edit_dir(tmp_path_factory):
    from genalign.pipelines.tiny_models import save_tiny_pipeline

    return save_tiny_pipeline("qwen_image_edit", tmp_path_factory.mktemp("qwen_image_edit") / "pipe")


def test_qwen_image_edit_lora_loads_into_the_plain_diffusers_pipeline_and_reproduces_the_sample(
    qwen_edit_dir, tmp_path, monkeypatch
):
    """diffusers' QwenImageEditPipeline with the exported LoRA, given genalign's source size (its
    ``calculate_dimensions`` would resize the source to about a megapixel; genalign resizes it to the output size,
    the reading its module documents), reproduces genalign's ODE latents to float rounding (genalign pads the prompt
    embeddings to a fixed length with a mask, diffusers does not), for a source of another size and aspect."""
    import diffusers.pipelines.qwenimage.pipeline_qwenimage_edit as edit_module
    from diffusers import DiffusionPipeline

    from genalign.export.flow import write_flow

    config = FlowPolicyConfig(model=str(qwen_edit_dir), architecture="qwen_image_edit", height=16, width=16,
                              num_steps=3, eval_num_steps=3, max_sequence_length=16, guidance_scale=2.0,
                              lora=flow_lora(rank=4, alpha=16.0))  # fmt: skip
    policy = build_flow_policy(config)
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():  # trained-looking adapters: B != 0
        for param in policy.trainable_parameters():
            param.add_(0.2 * torch.randn(param.shape, generator=generator))
    write_flow(policy, tmp_path / "export", merge_lora=False, dtype=None)
    monkeypatch.setattr(edit_module, "calculate_dimensions", lambda area, ratio: (16, 16, None))
    pipe = DiffusionPipeline.from_pretrained(qwen_edit_dir)
    assert type(pipe).__name__ == "QwenImageEditPipeline"
    pipe.set_progress_bar_config(disable=True)
    source = SOURCE.resize((24, 20))
    call = dict(image=source, prompt=["make the red circle blue"], negative_prompt="", true_cfg_scale=2.0,
                generator=torch.Generator().manual_seed(7), output_type="latent", **EDIT_SETTINGS)  # fmt: skip
    plain = pipe(**call).images
    pipe.load_lora_weights(tmp_path / "export")
    theirs = pipe(**call | {"generator": torch.Generator().manual_seed(7)}).images
    ours = policy.model.sampler(["make the red circle blue"], source_images=[source], guidance_scale=2.0,
                                noise_level=0.0, max_sequence_length=16, generator=torch.Generator().manual_seed(7),
                                **EDIT_SETTINGS)  # fmt: skip
    torch.testing.assert_close(theirs, ours.trajectory.final, rtol=0, atol=1e-5)
    assert (plain - ours.trajectory.final).abs().max() > 1e-3, "the LoRA must change the sample"


def test_qwen_image_edit_rollouts_store_the_per_row_prompt_embeddings_and_scores_do_not_read_the_rows(qwen_edit_dir):
    """Two rows with the same instruction and different sources get different stored prompt embeddings (the encoder
    read the source), both branches stored; re-scoring with the rows' images replaced gives the rollout's log-probs."""
    config = FlowPolicyConfig(model=str(qwen_edit_dir), architecture="qwen_image_edit", height=16, width=16,
                              num_steps=2, max_sequence_length=16, guidance_scale=2.0, lora=flow_lora(rank=2))  # fmt: skip
    policy = build_flow_policy(config)
    rows = [{"prompt": "add a green square", "image": image} for image in (SOURCE, SOURCE.rotate(90))]
    rollout = policy.rollout(rows, 2)
    cond = rollout.per_sample["cond.encoder_hidden_states"]  # [4, 16 + 4, 16]
    assert cond.shape == (4, 20, 16) and "uncond.encoder_hidden_states" in rollout.per_sample
    assert torch.equal(cond[0], cond[1]) and not torch.equal(cond[1], cond[2])
    for row in rows:
        row["image"] = Image.new("RGB", (16, 16))  # the score must not see this
    assert torch.equal(policy.score(rollout).logp, rollout.old_logp)


def test_qwen_image_edit_planner_shapes_are_those_it_makes_and_its_prompts_read_the_source(qwen_edit_dir):
    """The source tokens and the prompt embeddings (the prompt's tokens plus the source's 2 x 2 merged vision patches
    of 8 px) have the planner's shapes; another source image changes the prompt embeddings and the source tokens."""
    from diffusers import DiffusionPipeline

    arch = FLOW_ARCHITECTURES.get("qwen_image_edit")
    pipe = DiffusionPipeline.from_pretrained(qwen_edit_dir)
    configs = {role: module.config for role, module in pipe.components.items() if hasattr(module, "config")}
    assert arch.prompt_source_tokens(configs, height=16, width=16) == 4 and arch.source_in_prompt
    assert arch.prompt_source_tokens(configs, height=1024, width=512) == 128 * 64  # 8 px per token
    cpu = torch.device("cpu")
    planned = arch.text_embedding_shapes(pipe.transformer.config, configs, max_sequence_length=16 + 4, batch=1)
    planned |= arch.source_shapes(pipe.transformer.config, pipe.vae.config, height=16, width=16, num_frames=1, batch=1)
    made = {}
    for image in (SOURCE, SOURCE.rotate(90)):
        cond, uncond = arch().encode_with_sources(pipe, ["add a green square"], [image], negative_prompt="",
                                                  max_sequence_length=16, height=16, width=16, device=cpu)  # fmt: skip
        sources = arch().encode_sources(pipe, [image], height=16, width=16, num_frames=1, device=cpu)
        assert {k: tuple(v.shape) for k, v in (cond | sources).items()} == planned
        made[image.tobytes()] = (cond["encoder_hidden_states"], uncond["encoder_hidden_states"], sources)
    (cond_a, uncond_a, src_a), (cond_b, uncond_b, src_b) = made.values()
    assert not torch.equal(cond_a, cond_b) and not torch.equal(uncond_a, uncond_b)  # the negative prompt sees it too
    assert not torch.equal(src_a["source_tokens"], src_b["source_tokens"])
    with pytest.raises(ValueError, match=r"raise policy.max_sequence_length to at least"):
        arch().encode_with_sources(pipe, ["add a green square"], [SOURCE], negative_prompt="", max_sequence_length=2,
                                   height=16, width=16, device=cpu)  # fmt: skip
    with pytest.raises(ValueError, match=r"qwen_image_edit reads every prompt with its source image"):
        arch().encode(pipe, ["add a green square"], negative_prompt="", max_sequence_length=16, device=cpu)


# ---- FLUX.2 with a reference image: [dev] (embedded guidance) and [klein] (true CFG) ------------------------------------
#: architecture -> prompt tokens (FLUX.2 [dev]'s system message alone takes about 40)
REFERENCE_MODES = {"flux2_edit": 64, "flux2_klein_edit": 16}


@pytest.mark.parametrize("name", list(REFERENCE_MODES))
def test_flux2_reference_lora_loads_into_the_plain_diffusers_pipeline_and_reproduces_the_sample(name, tmp_path):
    """Flux2Pipeline / Flux2KleinPipeline called with ``image`` and the exported LoRA reproduce genalign's ODE latents
    bit for bit (64 px: diffusers refuses references under 64 px, and keeps a reference's own size where genalign
    resizes it to the output size, so the reference here has the output size)."""
    from diffusers import DiffusionPipeline

    from genalign.export.flow import write_flow
    from genalign.pipelines.architectures.flux2 import channels_to_patches
    from genalign.pipelines.tiny_models import save_tiny_pipeline

    model_dir = save_tiny_pipeline(name, tmp_path / "base")
    length, size = REFERENCE_MODES[name], 64
    config = FlowPolicyConfig(model=str(model_dir), architecture=name, height=size, width=size, num_steps=2,
                              eval_num_steps=2, max_sequence_length=length, guidance_scale=2.0,
                              lora=flow_lora(rank=4, alpha=16.0))  # fmt: skip
    policy = build_flow_policy(config)
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():  # trained-looking adapters: B != 0
        for param in policy.trainable_parameters():
            param.add_(0.2 * torch.randn(param.shape, generator=generator))
    write_flow(policy, tmp_path / "export", merge_lora=False, dtype=None)
    pipe = DiffusionPipeline.from_pretrained(model_dir)
    assert type(pipe).__name__ in FLOW_ARCHITECTURES.get(name).pipeline_classes
    pipe.set_progress_bar_config(disable=True)
    reference = SOURCE.resize((size, size))
    settings = dict(num_inference_steps=2, height=size, width=size, max_sequence_length=length, guidance_scale=2.0)

    def diffusers_latents() -> torch.Tensor:
        """diffusers' final latents as genalign's tokens ``[1, tokens, 4C]`` (Klein returns the VAE's layout)."""
        out = pipe(prompt=["make the red circle blue"], image=[reference], generator=torch.Generator().manual_seed(7),
                   output_type="latent", **settings).images  # fmt: skip
        if name == "flux2_edit":
            return out
        patches = out.reshape(1, out.shape[1], size // 4, 2, size // 4, 2).permute(0, 1, 3, 5, 2, 4)
        grid = patches.reshape(1, -1, size // 4, size // 4)  # [1, 4C, h, w], diffusers' _patchify_latents
        std = torch.sqrt(pipe.vae.bn.running_var.view(1, -1, 1, 1) + pipe.vae.config.batch_norm_eps)
        normalised = (grid - pipe.vae.bn.running_mean.view(1, -1, 1, 1)) / std
        assert channels_to_patches(grid).equal(out)
        return normalised.flatten(2).transpose(1, 2)

    plain = diffusers_latents()
    pipe.load_lora_weights(tmp_path / "export")
    theirs = diffusers_latents()
    ours = policy.model.sampler(["make the red circle blue"], source_images=[reference], noise_level=0.0,
                                generator=torch.Generator().manual_seed(7), **settings)  # fmt: skip
    torch.testing.assert_close(theirs, ours.trajectory.final, rtol=0, atol=1e-5 if name == "flux2_klein_edit" else 0)
    assert (plain - ours.trajectory.final).abs().max() > 1e-3, "the LoRA must change the sample"


def test_flux2_reference_tokens_have_the_planner_shape_and_ids_at_time_ten():
    """The reference tokens have the planner's shape and differ by reference; the reference's position ids are
    diffusers' ``_prepare_image_ids`` (time 10) and the text-to-image architecture is what ``auto`` picks."""
    from diffusers import Flux2Pipeline

    from genalign.pipelines.architectures import architecture_name
    from genalign.pipelines.architectures.flux2 import position_ids
    from genalign.pipelines.architectures.flux2_edit import REFERENCE_TIME

    arch = FLOW_ARCHITECTURES.get("flux2_klein_edit")
    pipe = arch.tiny_pipeline(0)
    cpu = torch.device("cpu")
    made = arch().encode_sources(pipe, [SOURCE, SOURCE.rotate(90)], height=16, width=16, num_frames=1, device=cpu)
    planned = arch.source_shapes(pipe.transformer.config, pipe.vae.config, height=16, width=16, num_frames=1, batch=2)
    assert planned == {k: tuple(v.shape) for k, v in made.items()} == {"source_tokens": (2, 16, 16)}
    assert not torch.equal(made["source_tokens"][0], made["source_tokens"][1])
    ids, _ = position_ids(4, 4, 1, 1, cpu)
    ids[..., 0] = REFERENCE_TIME
    assert ids.equal(Flux2Pipeline._prepare_image_ids([torch.zeros(1, 16, 4, 4)]).float())
    assert architecture_name("auto", "Flux2Pipeline") == "flux2"
    assert architecture_name("auto", "Flux2KleinPipeline") == "flux2_klein"


# ---- Wan2.2-TI2V-5B image-to-video: the source as latent frame 0 at timestep 0 ------------------------------------------
def test_wan22_ti2v_image_to_video_lora_loads_into_diffusers_and_reproduces_the_video(tmp_path):
    """WanImageToVideoPipeline (``expand_timesteps``) with the exported LoRA reproduces genalign's ODE latents bit for
    bit once genalign writes the source into the first latent frame (``output_latents``, as diffusers does at the end);
    genalign's velocity there is 0 and its per-token timesteps are 0 on the first frame's tokens (hand-made mask)."""
    from diffusers import DiffusionPipeline

    from genalign.export.flow import write_flow
    from genalign.pipelines.architectures import architecture_name
    from genalign.pipelines.architectures.wan22_ti2v_i2v import first_frame_mask
    from genalign.pipelines.tiny_models import save_tiny_pipeline

    model_dir = save_tiny_pipeline("wan22_ti2v_i2v", tmp_path / "base")
    config = FlowPolicyConfig(model=str(model_dir), architecture="wan22_ti2v_i2v", height=32, width=32, num_frames=5,
                              num_steps=3, eval_num_steps=3, max_sequence_length=8, guidance_scale=2.0,
                              lora=flow_lora(rank=4, alpha=16.0))  # fmt: skip
    policy = build_flow_policy(config)
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():  # trained-looking adapters: B != 0
        for param in policy.trainable_parameters():
            param.add_(0.2 * torch.randn(param.shape, generator=generator))
    write_flow(policy, tmp_path / "export", merge_lora=False, dtype=None)
    pipe = DiffusionPipeline.from_pretrained(model_dir)
    assert type(pipe).__name__ == "WanImageToVideoPipeline" and pipe.config.expand_timesteps
    assert architecture_name("auto", "WanImageToVideoPipeline", dict(pipe.config)) == "wan22_ti2v_i2v"
    assert architecture_name("auto", "WanImageToVideoPipeline", {"expand_timesteps": False}) == "wan_i2v"  # Wan2.1 I2V
    pipe.set_progress_bar_config(disable=True)
    source = SOURCE.resize((32, 32))
    settings = dict(num_inference_steps=3, height=32, width=32, num_frames=5, max_sequence_length=8, guidance_scale=2.0)
    call = dict(image=source, prompt=["make the red circle blue"], output_type="latent", **settings)
    plain = pipe(generator=torch.Generator().manual_seed(7), **call).frames
    pipe.load_lora_weights(tmp_path / "export")
    theirs = pipe(generator=torch.Generator().manual_seed(7), **call).frames  # [1, 48, 2, 2, 2]
    sampler = policy.model.sampler
    ours = sampler(["make the red circle blue"], source_images=[source], noise_level=0.0,
                   generator=torch.Generator().manual_seed(7), **settings)  # fmt: skip
    sources = sampler.encode_sources([source], height=32, width=32, num_frames=5)
    assert torch.equal(theirs, sampler.arch.output_latents(ours.trajectory.final, sources))
    assert (plain - theirs).abs().max() > 1e-3, "the LoRA must change the sample"
    assert theirs[:, :, 0].equal(sources["source_latents"][:, :, 0])  # the first latent frame is the source's
    mask = first_frame_mask(theirs)
    assert mask.shape == (1, 1, 2, 2, 2) and mask[:, :, 0].eq(0).all() and mask[:, :, 1].eq(1).all()
    velocity = sampler.arch.velocity(sampler.transformer, ours.trajectory.final, torch.full((1,), 500.0),
                                     {"encoder_hidden_states": torch.zeros(1, 8, 32), **sources}, guidance=1.0)  # fmt: skip
    assert velocity[:, :, 0].eq(0).all() and velocity[:, :, 1].abs().max() > 0
