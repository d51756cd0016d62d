"""Checkpoints usable without genalign: flow LoRA files that diffusers loads at full strength, tokenizers saved as they
were loaded, and LM folders (generation config, model card) that transformers / peft load and generate from exactly as
the policy samples."""

from __future__ import annotations

import json
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np
import pytest
import torch
from safetensors import safe_open

from genalign.pipelines.architectures import FLOW_ARCHITECTURES
from genalign.policies.lm.causal import CausalLMPolicyConfig, build_policy
from genalign.policies.lm.core import LoRAConfig
from genalign.policies.lm.export import MODEL_CARD_FILE
from genalign.policies.lm.tiny import build_tiny_causal_lm
from genalign.policies.lm.tokenizer import load_tokenizer

torch.set_num_threads(1)
PROMPTS = [{"prompt": "1 + 2 ="}, {"prompt": "what is 3 * 4 ? answer :"}, {"prompt": "a b c"}]


# ---- 1. flow LoRA files: diffusers rebuilds the trained scale ----------------------------------------------------------
@pytest.fixture(scope="module")
def sd3_dir(tmp_path_factory):
    from genalign.pipelines.tiny_models import save_tiny_pipeline

    return save_tiny_pipeline("sd3", tmp_path_factory.mktemp("interop_sd3") / "sd3")


def _flow_policy(sd3_dir, **lora_options):
    from genalign.policies.flow import FlowPolicyConfig, flow_lora
    from genalign.policies.flow import build_policy as build_flow_policy

    values = dict(model=str(sd3_dir), height=16, width=16, num_steps=4, eval_num_steps=4, max_sequence_length=8)
    policy = build_flow_policy(FlowPolicyConfig(**values, lora=flow_lora(rank=4, alpha=16.0, **lora_options)))
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():  # trained-looking adapters: B != 0, so the LoRA scale shows in every output
        for param in policy.trainable_parameters():
            param.add_(0.2 * torch.randn(param.shape, generator=generator))
    return policy


def _diffusers_pipeline(sd3_dir, lora_dir=None):
    from diffusers import StableDiffusion3Pipeline

    pipe = StableDiffusion3Pipeline.from_pretrained(sd3_dir)
    pipe.set_progress_bar_config(disable=True)
    if lora_dir is not None:
        pipe.load_lora_weights(lora_dir)
    return pipe


def test_diffusers_loads_the_flow_lora_at_the_trained_scale_and_generates_the_same_latents(sd3_dir, tmp_path):
    """alpha (16) != rank (4): without the adapter metadata diffusers would build alpha = rank, a quarter of the
    trained LoRA effect. CFG-free, diffusers' own ``__call__`` gives genalign's latents bit for bit. With CFG they agree
    to float rounding only: diffusers runs the unconditional and conditional branches as one batch of 2, genalign as
    two batches of 1 (same math, different reduction blocking in the CPU kernels); genalign's sampler run on the
    transformer diffusers loaded is bit-identical there too, so the loaded LoRA itself is exact."""
    from genalign.pipelines import FlowLogProbPipeline

    policy = _flow_policy(sd3_dir)
    policy.save(tmp_path / "lora")
    with safe_open(str(tmp_path / "lora" / "pytorch_lora_weights.safetensors"), "pt") as f:
        metadata = json.loads(f.metadata()["lora_adapter_metadata"])
    assert metadata["transformer.lora_alpha"] == 16.0 and metadata["transformer.r"] == 4
    pipe = _diffusers_pipeline(sd3_dir, tmp_path / "lora")
    (loaded,) = pipe.transformer.peft_config.values()
    assert (loaded.r, loaded.lora_alpha) == (4, 16.0)

    prompts = ["two red circles", "a blue square"]
    for guidance in (1.0, 3.0):
        settings = dict(num_inference_steps=4, guidance_scale=guidance, height=16, width=16, max_sequence_length=8)
        ours = policy.model.sampler(prompts, noise_level=0.0, generator=torch.Generator().manual_seed(7), **settings)
        theirs = pipe(prompts, generator=torch.Generator().manual_seed(7), output_type="latent", **settings).images
        wrapped = FlowLogProbPipeline(pipe)(
            prompts, noise_level=0.0, generator=torch.Generator().manual_seed(7), **settings
        )
        assert torch.equal(wrapped.trajectory.final, ours.trajectory.final)
        if guidance == 1.0:
            assert torch.equal(theirs, ours.trajectory.final)
        else:
            torch.testing.assert_close(theirs, ours.trajectory.final, rtol=0, atol=1e-5)
    base = _diffusers_pipeline(sd3_dir)(
        prompts, generator=torch.Generator().manual_seed(7), output_type="latent", **settings
    ).images
    assert (base - ours.trajectory.final).abs().max() > 0.1, "the LoRA must change the samples"


def test_dora_and_rslora_flow_adapters_load_into_diffusers_exactly(sd3_dir, tmp_path):
    policy = _flow_policy(sd3_dir, use_dora=True, use_rslora=True)
    policy.save(tmp_path / "lora")
    pipe = _diffusers_pipeline(sd3_dir, tmp_path / "lora")
    (loaded,) = pipe.transformer.peft_config.values()
    assert loaded.use_dora and loaded.use_rslora
    cond, _ = policy.model.sampler.encode(["two red circles"], max_sequence_length=8)
    x = torch.randn(1, policy.model.transformer.config.in_channels, 2, 2, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        ours = policy.model.transformer(hidden_states=x, timestep=torch.tensor([500.0]), **cond, return_dict=False)[0]
        theirs = pipe.transformer(hidden_states=x, timestep=torch.tensor([500.0]), **cond, return_dict=False)[0]
    assert torch.equal(ours, theirs)


def test_flow_load_reads_files_with_and_without_adapter_metadata(sd3_dir, tmp_path):
    from peft.utils import get_peft_model_state_dict

    policy = _flow_policy(sd3_dir)
    policy.save(tmp_path / "new")
    layers = get_peft_model_state_dict(policy.model.transformer)
    type(policy.model.sampler.pipe).save_lora_weights(tmp_path / "old", transformer_lora_layers=layers)  # as before
    trained = {name: p.detach().clone() for name, p in policy.model.transformer.named_parameters() if p.requires_grad}
    for folder in ("new", "old"):
        fresh = _flow_policy(sd3_dir)
        fresh.load(tmp_path / folder)
        params = {name: p for name, p in fresh.model.transformer.named_parameters() if p.requires_grad}
        assert params.keys() == trained.keys() and all(torch.equal(params[k], trained[k]) for k in trained)


# ---- 1b. every flow architecture: the exported LoRA in the plain diffusers pipeline of that model -----------------------
#: keyword arguments of each diffusers pipeline's ``__call__`` that give genalign's guidance: the CFG scale of SD3, Wan
#: and FLUX.2 [klein] (their negative prompt defaults to genalign's ""), the embedded guidance of FLUX.1 / FLUX.2 [dev],
#: Qwen-Image's ``true_cfg_scale``, which needs the negative prompt passed
DIFFUSERS_GUIDANCE = {
    "qwen_image": lambda g: {"true_cfg_scale": g, "negative_prompt": ""},
    "sana": lambda g: {"guidance_scale": g, "use_resolution_binning": False},  # genalign samples the configured size
}
#: prompt tokens per architecture (FLUX.2 [dev]'s system message alone takes about 40)
SEQUENCE_LENGTH = {"flux2": 64}
#: image sizes other than 16 px: Sana's pipeline takes multiples of 32 only
SIZE = {"sana": 32}


#: architectures whose LoRA interop is checked with their own inputs: source images (tests/pipelines/test_conditioning.py),
#: Wan2.2's two experts (tests/trainer/test_video_training.py) and HunyuanVideo 1.5, whose pipeline class has no LoRA
#: loader and takes its guidance from a guider (tests/pipelines/test_hunyuan_video15.py)
OWN_INTEROP_TESTS = {
    "sd3_img2img",
    "flux_kontext",
    "wan_i2v",
    "qwen_image_edit",
    "flux2_edit",
    "flux2_klein_edit",
    "wan22_ti2v_i2v",
    "wan22",
    "wan22_ti2v",
    "hunyuan_video15",
    "hunyuan_video15_i2v",
}


@pytest.mark.parametrize("architecture", [n for n in FLOW_ARCHITECTURES.names() if n not in OWN_INTEROP_TESTS])
def test_every_flow_architectures_exported_lora_reproduces_genalign_samples_in_plain_diffusers(architecture, tmp_path):
    """Through ``genalign export`` 's writer, diffusers' own pipeline class loads the LoRA and, with the same seed and
    settings, samples genalign's ODE images (to the last 8-bit level: CFG branches run batched in diffusers and one at
    a time in genalign, which changes float rounding only); genalign's sampler run on the transformer diffusers loaded
    reproduces genalign's final latents bit for bit, so the loaded adapters are exact."""
    from diffusers import DiffusionPipeline

    from genalign.export.flow import write_flow
    from genalign.pipelines import FlowLogProbPipeline
    from genalign.pipelines.tiny_models import save_tiny_pipeline
    from genalign.policies.flow import FlowPolicyConfig, flow_lora
    from genalign.policies.flow import build_policy as build_flow_policy

    base = save_tiny_pipeline(architecture, tmp_path / "base")
    frames, size = 5 if architecture == "wan" else 1, SIZE.get(architecture, 16)
    length = SEQUENCE_LENGTH.get(architecture, 8)
    policy = build_flow_policy(FlowPolicyConfig(model=str(base), architecture=architecture, height=size, width=size,
                                                num_frames=frames, max_sequence_length=length,
                                                lora=flow_lora(rank=4, alpha=8.0)))  # fmt: skip
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():  # trained-looking adapters
        for param in policy.trainable_parameters():
            param.add_(0.3 * torch.randn(param.shape, generator=generator))
    write_flow(policy, tmp_path / "export", merge_lora=False, dtype=None)

    pipe = DiffusionPipeline.from_pretrained(base)
    assert type(pipe).__name__ in FLOW_ARCHITECTURES.get(architecture).pipeline_classes or architecture == "sd35"
    pipe.set_progress_bar_config(disable=True)
    pipe.load_lora_weights(tmp_path / "export")
    prompts, guidance = ["two red circles", "a blue square"], 2.0
    settings = dict(num_inference_steps=2, height=size, width=size, max_sequence_length=length)
    settings |= {"num_frames": frames} if architecture == "wan" else {}
    ours = policy.model.sampler(prompts, guidance_scale=guidance, noise_level=0.0,
                                generator=torch.Generator().manual_seed(7), **settings)  # fmt: skip
    wrapped = FlowLogProbPipeline(pipe, architecture=architecture)(
        prompts, guidance_scale=guidance, noise_level=0.0, generator=torch.Generator().manual_seed(7), **settings
    )
    assert torch.equal(wrapped.trajectory.final, ours.trajectory.final)

    call = DIFFUSERS_GUIDANCE.get(architecture, lambda g: {"guidance_scale": g})(guidance)
    theirs = pipe(prompt=prompts, generator=torch.Generator().manual_seed(7), output_type="np", **call, **settings)
    theirs = np.asarray(theirs.frames if architecture == "wan" else theirs.images) * 255.0
    ours_pixels = np.stack([np.asarray(output, dtype=np.float32) for output in ours.outputs])
    assert theirs.shape == ours_pixels.shape
    assert np.abs(theirs - ours_pixels).max() <= 1.0
    pipe.unload_lora_weights()
    untrained = pipe(prompt=prompts, generator=torch.Generator().manual_seed(7), output_type="np", **call, **settings)
    untrained = np.asarray(untrained.frames if architecture == "wan" else untrained.images) * 255.0
    assert np.abs(untrained - ours_pixels).max() > 2.0, "the LoRA must change the samples"


# ---- 2. tokenizers saved as they were loaded ---------------------------------------------------------------------------
def _gpt2_tokenizer():
    """A byte-level BPE ``GPT2Tokenizer`` (the fast, tokenizers-backed class) with a hand-written vocabulary: the 256
    byte symbols, a few merges (digits and a contraction among them, which Qwen2's pre-tokenizer splits differently)
    and ``<|endoftext|>``."""
    from transformers import GPT2TokenizerFast
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    vocab = {symbol: i for i, symbol in enumerate(sorted(set(bytes_to_unicode().values())))}
    merges = [("h", "e"), ("l", "l"), ("he", "ll"), ("Ġ", "w"), ("o", "r"), ("1", "2"), ("12", "3"), ("'", "s")]
    for left, right in merges:
        vocab[left + right] = len(vocab)
    vocab["<|endoftext|>"] = len(vocab)
    return GPT2TokenizerFast(vocab=vocab, merges=merges)


@pytest.mark.parametrize("lora_rank", [0, 4])
def test_a_gpt2_tokenizer_of_a_qwen2_model_keeps_its_class_and_ids_through_training_and_saving(tmp_path, lora_rank):
    from transformers import AutoTokenizer

    tokenizer = _gpt2_tokenizer()
    text = "hello world 12345 it's"
    expected = tokenizer(text).input_ids
    model_dir = build_tiny_causal_lm(tmp_path / "model", architecture="qwen2", vocab_size=272, tokenizer=tokenizer)
    auto = AutoTokenizer.from_pretrained(model_dir)  # transformers substitutes Qwen2Tokenizer for qwen2 configs
    if type(auto) is not type(tokenizer):
        assert auto(text).input_ids != expected, "the substitute class must split differently for this test to bite"

    policy = build_policy(CausalLMPolicyConfig(model=str(model_dir), max_new_tokens=4, lora=LoRAConfig(rank=lora_rank)))
    assert type(policy.tokenizer) is type(tokenizer) and policy.tokenizer(text).input_ids == expected
    policy.save(tmp_path / "ckpt")
    saved = json.loads((tmp_path / "ckpt" / "tokenizer_config.json").read_text())
    assert saved["tokenizer_class"] == type(tokenizer).__name__
    reloaded = [load_tokenizer(str(tmp_path / "ckpt")), type(tokenizer).from_pretrained(tmp_path / "ckpt")]
    if lora_rank:  # an adapter folder has no model config, so AutoTokenizer reads the declared class as well
        reloaded.append(AutoTokenizer.from_pretrained(tmp_path / "ckpt"))
    for again in reloaded:
        assert type(again) is type(tokenizer) and again(text).input_ids == expected
    assert f"{type(tokenizer).__name__}.from_pretrained" in (tmp_path / "ckpt" / MODEL_CARD_FILE).read_text()


def test_a_tokenizer_class_that_does_not_reproduce_the_file_falls_back_to_auto_tokenizer(tmp_path):
    from transformers import AutoTokenizer

    from genalign.policies.lm.tiny import build_tiny_tokenizer

    build_tiny_tokenizer(64).save_pretrained(tmp_path)
    settings = json.loads((tmp_path / "tokenizer_config.json").read_text())
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(settings | {"tokenizer_class": "GPT2Tokenizer"}))
    tokenizer = load_tokenizer(str(tmp_path))  # a GPT-2 byte-level pipeline would break the word-level file
    assert type(tokenizer) is type(AutoTokenizer.from_pretrained(tmp_path))


# ---- 3. LM folders load and generate without genalign -----------------------------------------------------------------
@pytest.mark.parametrize(("architecture", "lora_rank"), [("qwen2", 0), ("llama", 0), ("llama", 4)])
def test_saved_lm_folder_generates_the_policys_greedy_completions_with_transformers_and_peft(
    tmp_path, architecture, lora_rank
):
    from transformers import AutoModelForCausalLM, GenerationConfig

    model_dir = build_tiny_causal_lm(tmp_path / "base", architecture=architecture, vocab_size=96)
    lora = LoRAConfig(rank=lora_rank, alpha=8.0, modules_to_save=["lm_head"] if lora_rank else [])
    policy = build_policy(CausalLMPolicyConfig(model=str(model_dir), max_new_tokens=6, top_k=1, lora=lora))
    generator = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for param in policy.trainable_parameters():
            param.add_(0.3 * torch.randn(param.shape, generator=generator))
        # make row 0 end early: the end token's head row becomes 1.5 x that of the 3rd token greedy decoding picks
        head = policy.hf_model.get_output_embeddings()
        weight = head.modules_to_save["default"].weight if lora_rank else head.weight
        third = int(policy.rollout(PROMPTS, group_size=1, mode="eval").per_sample["completion_ids"][0, 2])
        weight[policy.eos_token_ids[0]] = 1.5 * weight[third]
    rollout = policy.rollout(PROMPTS, group_size=1, mode="eval")  # top_k = 1: greedy
    assert rollout.action_mask.sum(1).min() < 6, "a completion must end with the end token"
    policy.save(tmp_path / "ckpt")

    if lora_rank:
        from peft import PeftModel

        model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(model_dir), tmp_path / "ckpt")
    else:
        model = AutoModelForCausalLM.from_pretrained(tmp_path / "ckpt")
    generation = GenerationConfig.from_pretrained(tmp_path / "ckpt")
    eos = generation.eos_token_id if isinstance(generation.eos_token_id, list) else [generation.eos_token_id]
    assert tuple(eos) == policy.eos_token_ids and generation.pad_token_id == policy.pad_token_id
    assert generation.max_new_tokens == 6
    data = rollout.per_sample
    with torch.no_grad():
        out = model.eval().generate(
            input_ids=data["prompt_ids"],
            attention_mask=data["prompt_mask"],
            generation_config=generation,
            do_sample=False,
        )
    completions = out[:, data["prompt_ids"].shape[1] :]
    for row, ids, mask in zip(completions, data["completion_ids"], data["completion_mask"], strict=True):
        length = int(mask.sum())
        assert row[:length].tolist() == ids[:length].tolist()
        assert all(token == generation.pad_token_id for token in row[length:].tolist())

    card = (tmp_path / "ckpt" / MODEL_CARD_FILE).read_text()
    assert str(model_dir) in card and "causal_lm" in card and "AutoModelForCausalLM" in card
    assert ("PeftModel.from_pretrained" in card) == bool(lora_rank)
