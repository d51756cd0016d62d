"""Every registered flow architecture against its own tiny pipeline: the planner's config-only shapes equal what the
loaded pipeline makes, and the block counts round-trip through a config with other counts."""

import re

import pytest
import torch
from PIL import Image

from genalign.pipelines.architectures import FLOW_ARCHITECTURES, architecture_of_transformer
from genalign.planning.architectures import ComponentSpec
from genalign.planning.depth import block_counts, with_block_counts

SIZES = {"height": 16, "width": 16, "num_frames": 5}
#: prompt tokens per architecture: FLUX.2 [dev]'s system message alone takes about 40; Qwen-Image-Edit's template
#: leaves a few tokens of the tiny tokenizer around the instruction
MAX_SEQUENCE_LENGTH = {"flux2": 64, "qwen_image_edit": 16}
#: a source image for the architectures whose text encoder reads it with the prompt (Qwen-Image-Edit)
SOURCE = Image.new("RGB", (16, 16), (200, 40, 40))


@pytest.fixture(scope="module", params=FLOW_ARCHITECTURES.names())
def tiny(request):
    torch.set_num_threads(1)
    arch = FLOW_ARCHITECTURES.get(request.param)
    return arch, arch.tiny_pipeline(0)


def test_config_only_latent_shape_is_the_shape_of_the_initial_latents(tiny):
    arch, pipe = tiny
    planned = arch.latent_shape(pipe.transformer.config, pipe.vae.config, batch=3, **SIZES)
    latents = arch().initial_latents(pipe, 3, generator=torch.Generator().manual_seed(0), **SIZES)
    assert planned == tuple(latents.shape)


def test_config_only_text_embedding_shapes_bound_those_of_encode(tiny):
    """Equal but for the token count, which the planner takes from CLIP's positions (77 in the published SD3 models,
    the length of their CLIP tokenizers; the tiny tokenizers are shorter): an upper bound."""
    arch, pipe = tiny
    configs = {role: module.config for role, module in pipe.components.items() if hasattr(module, "config")}
    tokens = MAX_SEQUENCE_LENGTH.get(arch.name, 4)
    source_tokens = arch.prompt_source_tokens(configs, height=16, width=16)  # the source's, when the encoder reads it
    planned = arch.text_embedding_shapes(pipe.transformer.config, configs, max_sequence_length=tokens + source_tokens,
                                         batch=2)  # fmt: skip
    prompts, cpu = ["a red circle", "two dogs"], torch.device("cpu")
    if arch.source_in_prompt:
        cond, _ = arch().encode_with_sources(pipe, prompts, [SOURCE, SOURCE], negative_prompt="",
                                             max_sequence_length=tokens, height=16, width=16, device=cpu)  # fmt: skip
    else:
        assert source_tokens == 0
        cond, _ = arch().encode(pipe, prompts, negative_prompt="", max_sequence_length=tokens, device=cpu)
    assert planned.keys() == cond.keys()
    for keyword, tensor in cond.items():
        assert planned[keyword][0] == 2 and planned[keyword][2:] == tensor.shape[2:], keyword
        assert planned[keyword][1] >= tensor.shape[1] if tensor.dim() > 2 else planned[keyword] == tensor.shape


def test_latents_for_decode_have_the_vae_layout(tiny):
    arch, pipe = tiny
    latents = torch.zeros(arch.latent_shape(pipe.transformer.config, pipe.vae.config, batch=2, **SIZES))
    decodable = arch.latents_for_decode(latents, pipe.vae.config, height=SIZES["height"], width=SIZES["width"])
    assert decodable.shape[:2] == (2, pipe.vae.config.get("latent_channels", pipe.vae.config.get("z_dim")))


def test_block_counts_round_trip_and_find_the_architecture_by_its_transformer_class(tiny):
    arch, pipe = tiny
    spec = ComponentSpec("diffusers", type(pipe.transformer).__name__, dict(pipe.transformer.config))
    found = architecture_of_transformer(spec.class_name)  # a variant (sd3_img2img ...) finds the one it extends
    assert found is arch or issubclass(arch, found)
    counts = block_counts(spec)
    assert counts == arch.block_counts(spec.config) and all(n >= 0 for n in counts.values())
    more = {kind: n + 2 for kind, n in counts.items()}
    assert block_counts(with_block_counts(spec, more)) == more
    assert block_counts(with_block_counts(with_block_counts(spec, more), counts)) == counts
    assert spec.config == dict(pipe.transformer.config)  # the original config is not changed


def test_the_architecture_field_accepts_registered_names_only(tmp_path):
    from genalign.policies.flow.config import FlowPolicyConfig

    for name in ["auto", *FLOW_ARCHITECTURES.names()]:
        FlowPolicyConfig(model=str(tmp_path), architecture=name).validate()
    names = ", ".join(["auto", *FLOW_ARCHITECTURES.names()])
    assert names.startswith("auto, flux, ") and ", sd3, " in names
    with pytest.raises(ValueError, match=re.escape(f"policy.architecture='qwenimage' is not a registered flow "
                                                   f"architecture; use one of {names}. Did you mean 'qwen_image'")):  # fmt: skip
        FlowPolicyConfig(model=str(tmp_path), architecture="qwenimage").validate()
