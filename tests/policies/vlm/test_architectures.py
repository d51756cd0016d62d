"""The per-architecture extension point of the VLM family: the table by ``model_type``, each architecture's split of
the processor's batch output and its join per micro-batch, the placeholder tokens never sampled, token types and
positions in the scoring pass (Gemma 3's bidirectional image attention), Idefics3's padded sub-images."""

from __future__ import annotations

import json
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from types import SimpleNamespace

import pytest
import torch
from torch.nn import functional as F

from genalign.data.vlm_tasks import shapes_vqa_rows
from genalign.policies.base import ScoreRequest
from genalign.policies.lm.logprobs import backbone_hidden_states
from genalign.policies.lm.multi_turn_options import MultiTurnOptions
from genalign.policies.vlm import VLMPolicyConfig, build_policy
from genalign.policies.vlm.architectures import ARCHITECTURES, architecture_of
from genalign.policies.vlm.architectures.idefics3 import TILE_TOKENS
from tests.policies.vlm.tiny_models import tiny_model_dir

torch.set_num_threads(1)
TINY = ("qwen2_5_vl", "qwen3_vl", "gemma3", "idefics3", "llava_onevision")
_POLICIES: dict[str, object] = {}


def policy_of(model_type: str):
    """One policy per tiny model for the module (building one costs a second)."""
    if model_type not in _POLICIES:
        config = VLMPolicyConfig(
            model=tiny_model_dir(model_type), max_new_tokens=5, temperature=3.0, min_pixels=256, max_pixels=2304
        )
        _POLICIES[model_type] = build_policy(config, "cpu")
    return _POLICIES[model_type]


def mixed_rows() -> list[dict]:
    """A row with one image, a text-only row, a row with two images."""
    one, two, three = shapes_vqa_rows(3, seed=0, kinds=["count"])
    return [one, {"prompt": "How many red circles are there?"}, dict(two, image=[two["image"], three["image"]])]


def test_the_table_serves_each_model_type_and_names_the_supported_ones_otherwise():
    assert {"qwen2_vl", "qwen2_5_vl", "qwen3_vl", "gemma3", "idefics3", "smolvlm", "llava_onevision"} == set(
        ARCHITECTURES
    )
    assert architecture_of(SimpleNamespace(model_type="qwen3_vl")).name == "qwen-vl"
    with pytest.raises(
        ValueError, match=r"model_type='internvl'.*supported: gemma3, idefics3, llava_onevision, qwen2_5_vl"
    ):
        architecture_of(SimpleNamespace(model_type="internvl"))


@pytest.mark.parametrize("model_type", TINY)
def test_split_then_concat_gives_back_the_processors_batch_output(model_type):
    """Each row's share of the processor's outputs, joined again for all rows, is the processor's own batch output
    (Idefics3: the same padded stack, views in the same slots)."""
    policy = policy_of(model_type)
    architecture, rows = policy.architecture, mixed_rows()
    encoded = policy.encode_prompts(rows)
    assert [len(e.image_sizes) for e in encoded] == [1, 0, 2]
    joined = architecture.concat([e.media for e in encoded])
    texts = [policy.processor.apply_chat_template(m, add_generation_prompt=True, tokenize=False) for m in (
        [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": rows[0]["prompt"]}]}],
        [{"role": "user", "content": [{"type": "text", "text": rows[1]["prompt"]}]}],
        [{"role": "user", "content": [{"type": "image"}, {"type": "image"}, {"type": "text", "text": rows[2]["prompt"]}]}],
    )]  # fmt: skip
    images = [[rows[0]["image"]], [], rows[2]["image"]]
    kwargs = architecture.image_kwargs(256, 2304)
    batch = policy.processor(
        text=texts, images=images, padding=True, padding_side="left", return_tensors="pt", **kwargs
    )
    assert set(joined) == set(architecture.image_keys)
    for key in architecture.image_keys:
        assert torch.equal(joined[key], batch[key].to(joined[key].dtype)), key
    mask = batch["attention_mask"].bool()
    assert all(torch.equal(e.input_ids, batch["input_ids"][i][mask[i]]) for i, e in enumerate(encoded))


@pytest.mark.parametrize("model_type", TINY)
def test_placeholder_tokens_are_declared_and_never_sampled(model_type):
    policy = policy_of(model_type)
    config, tokenizer = policy.hf_model.config, policy.tokenizer
    expected = {
        "qwen2_5_vl": {"<|image_pad|>", "<|video_pad|>", "<|vision_start|>", "<|vision_end|>"},
        "qwen3_vl": {"<|image_pad|>", "<|video_pad|>", "<|vision_start|>", "<|vision_end|>"},
        "gemma3": {"<start_of_image>", "<end_of_image>", "<image_soft_token>"},
        "idefics3": {"<image>", *TILE_TOKENS},
        "llava_onevision": {"<image>", "<video>"},
    }[model_type]
    assert set(policy.suppressed_token_ids) == {tokenizer.convert_tokens_to_ids(t) for t in expected}
    expected_image_token = getattr(config, "image_token_id", getattr(config, "image_token_index", None))
    assert policy.image_token_id == expected_image_token is not None
    with torch.no_grad():  # a head that prefers the placeholders: generation must still avoid them
        head = policy.hf_model.get_output_embeddings()
        saved = head.weight.detach().clone()
        head.weight[list(policy.suppressed_token_ids)] = 5.0 * head.weight.abs().max()
        try:
            rollout = policy.rollout(mixed_rows()[:2], 2)
            policy.score(rollout)  # a sampled placeholder would fail the forward pass
        finally:
            head.weight.copy_(saved)
    sampled = set(rollout.per_sample["completion_ids"][rollout.action_mask > 0].tolist())
    assert not sampled & set(policy.suppressed_token_ids)


def test_gemma3_scores_with_bidirectional_image_attention_and_positions_from_the_mask():
    """Scoring passes ``token_type_ids`` (1 at the soft image tokens) and ``position_ids = cumsum(mask) - 1``; the
    log-probs equal a plain forward of the model with those inputs, in which an image's first soft token attends the
    later ones (its state differs from a causal pass; the tokens before the image do not)."""
    policy = policy_of("gemma3")
    rollout = policy.rollout(mixed_rows(), 2)
    inputs = policy.model_inputs(rollout)
    soft = inputs["input_ids"] == policy.hf_model.config.image_token_index
    assert torch.equal(inputs["token_type_ids"], soft.long()) and soft.sum() == 4 * (1 + 0 + 2) * 2
    mask = inputs["attention_mask"]
    assert torch.equal(inputs["position_ids"][mask > 0], (mask.cumsum(1) - 1)[mask > 0])
    width = rollout.per_sample["prompt_ids"].shape[1]

    def plain_logp(model_inputs) -> torch.Tensor:
        logits = policy.hf_model(**model_inputs).logits[:, width - 1 : -1] / policy.config.temperature  # [n, T, V]
        logits[..., list(policy.suppressed_token_ids)] += -1.0e4
        targets = model_inputs["input_ids"][:, width:]
        return F.log_softmax(logits.float(), -1).gather(-1, targets[..., None])[..., 0] * rollout.action_mask

    with torch.no_grad():
        logp = policy.score(rollout).logp
        expected = plain_logp(inputs)
        both_ways = backbone_hidden_states(policy.hf_model, **inputs)  # [n, L, H]
        causal = backbone_hidden_states(policy.hf_model, **{k: v for k, v in inputs.items() if k != "token_type_ids"})
    assert (logp - expected).abs().max() < 1e-5
    first = int(soft[0].nonzero()[0])  # sample 0's first soft image token: it sees the later ones only both ways
    assert torch.equal(both_ways[0, :first], causal[0, :first])
    assert (both_ways[0, first] - causal[0, first]).abs().max() > 1e-3


def test_idefics3_keeps_each_samples_views_and_pads_them_per_micro_batch():
    policy = policy_of("idefics3")
    rollout = policy.rollout(mixed_rows(), 1)
    views = [int(p.shape[0]) for p in rollout.per_sample["pixel_values"]]
    assert views == [5, 0, 10], "48 x 48 -> 64 x 64: 2 x 2 tiles of 32 and a global view per image"
    part = rollout.select([1, 2])
    joined = policy.architecture.concat([dict(zip(("pixel_values", "pixel_attention_mask"), m, strict=True)) for m in
                                         zip(part.per_sample["pixel_values"], part.per_sample["pixel_attention_mask"])])  # fmt: skip
    assert joined["pixel_values"].shape == (2, 10, 3, 32, 32) and not joined["pixel_values"][0].any()
    with torch.no_grad():
        whole = policy.score(rollout, ScoreRequest.of("logp_without_image"))
        parts = [policy.score(rollout.select(idx)).logp for idx in ([0], [1, 2])]
    assert torch.equal(torch.cat(parts), whole.logp)
    blank = whole.features["logp_without_image"]
    assert torch.equal(blank[1], whole.logp[1]) and not torch.equal(blank[0], whole.logp[0]), "only images blanked"


def test_multi_turn_needs_an_architecture_that_supports_it():
    config = VLMPolicyConfig(
        model=tiny_model_dir("gemma3"),
        multi_turn=MultiTurnOptions(environments="tests.policies.vlm.scripted_environments:ScriptedCrop"),
    )
    with pytest.raises(ValueError, match=r"gemma3 architecture .* does not support multi-turn rollouts"):
        build_policy(config, "cpu")


def test_an_unsupported_model_type_is_refused_before_its_weights_load(tmp_path):
    # a real image-text-to-text type this family does not declare; config.json only, no processor or weights
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "paligemma"}))
    with pytest.raises(ValueError, match=r"model_type='paligemma', which the VLM family does not support; supported:"):
        build_policy(VLMPolicyConfig(model=str(tmp_path)), "cpu")


def test_frame_reordering_is_refused_where_no_patch_grid_locates_the_frames():
    policy = policy_of("gemma3")
    rollout = policy.rollout(mixed_rows()[2:], 1)
    with pytest.raises(ValueError, match=r"logp_frames_shuffled reorders the patches of Qwen-VL images; the gemma3"):
        policy.score(rollout, ScoreRequest.of("logp_frames_shuffled"))


@pytest.mark.parametrize("model_type", TINY)
def test_planned_image_tokens_count_what_the_processor_writes_for_one_image(model_type):
    """``genalign plan``'s image budget equals the tokens the tiny model's processor adds for one square image
    (48 px: a multiple of Qwen's 12-pixel merged patch; Idefics3 tiles by its processor config, Gemma 3 writes its
    fixed soft tokens and separators, LLaVA-OneVision its base view, tiles and row ends)."""
    from PIL import Image
    from transformers import AutoConfig, AutoProcessor

    folder = tiny_model_dir(model_type)
    config, processor = AutoConfig.from_pretrained(folder), AutoProcessor.from_pretrained(folder)
    architecture = architecture_of(config)
    side = 48

    def prompt_tokens(content: list[dict], images: list) -> int:
        text = processor.apply_chat_template([{"role": "user", "content": content}], add_generation_prompt=True)
        kwargs = architecture.image_kwargs(side * side, side * side) if images else {}
        return processor(text=[text], images=images or None, return_tensors="pt", **kwargs)["input_ids"].shape[1]

    written = prompt_tokens([{"type": "image"}, {"type": "text", "text": "hi"}], [Image.new("RGB", (side, side))])
    written -= prompt_tokens([{"type": "text", "text": "hi"}], [])
    processor_config = processor.image_processor.to_dict() if model_type == "idefics3" else None
    assert architecture.planned_image_tokens(config, side * side, processor_config) == written
