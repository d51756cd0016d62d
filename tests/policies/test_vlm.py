"""Vision-language policy: tiny Qwen2-VL and Qwen2.5-VL built from configs, images carried through rollout, scoring,
micro-batches and group repetition; bad inputs; LoRA / frozen vision tower; token features; rollout structure;
checkpoints with the processor; resumable sampler state."""

from __future__ import annotations

import io
import math
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest
import torch
from PIL import Image

from genalign.assets import resolve
from genalign.data.images import ImageLoadError
from genalign.data.vlm_tasks import shapes_vqa_rows
from genalign.policies.base import Policy, PolicyCapabilities, RolloutRequest, ScoreRequest
from genalign.policies.lm.core import LoRAConfig
from genalign.policies.vlm import (
    VLMPolicyConfig,
    build_policy,
    chat_messages,
    concat_images,
    split_images,
    suppressed_head,
    vision_token_ids,
    vision_tower,
)

torch.set_num_threads(1)
ARCHS = ("qwen2_vl", "qwen2_5_vl")


def _tiny_model(arch: str, processor):
    """A 2-layer text model of width 64 and a 2-block vision tower of width 32, matching the processor's patches."""
    from transformers import (
        Qwen2_5_VLConfig,
        Qwen2_5_VLForConditionalGeneration,
        Qwen2VLConfig,
        Qwen2VLForConditionalGeneration,
    )

    tok = processor.tokenizer
    ids = {
        t: tok.convert_tokens_to_ids(t)
        for t in ("<|image_pad|>", "<|video_pad|>", "<|vision_start|>", "<|vision_end|>")
    }
    patch = processor.image_processor.patch_size
    text = {
        "vocab_size": len(tok),
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "rope_parameters": {"rope_type": "default", "rope_theta": 10_000.0, "mrope_section": [2, 3, 3]},
        "eos_token_id": tok.eos_token_id,
        "pad_token_id": tok.pad_token_id,
        "bos_token_id": None,
    }
    common = {"patch_size": patch, "spatial_merge_size": 2, "temporal_patch_size": 2, "depth": 2, "num_heads": 2}
    tokens = {
        "image_token_id": ids["<|image_pad|>"],
        "video_token_id": ids["<|video_pad|>"],
        "vision_start_token_id": ids["<|vision_start|>"],
        "vision_end_token_id": ids["<|vision_end|>"],
    }
    torch.manual_seed(0)
    if arch == "qwen2_vl":
        vision = {**common, "embed_dim": 32, "hidden_size": 64, "mlp_ratio": 2}
        return Qwen2VLForConditionalGeneration(Qwen2VLConfig(text_config=text, vision_config=vision, **tokens))
    vision = {**common, "hidden_size": 32, "intermediate_size": 64, "out_hidden_size": 64, "window_size": 16}
    vision["fullatt_block_indexes"] = [1]
    return Qwen2_5_VLForConditionalGeneration(Qwen2_5_VLConfig(text_config=text, vision_config=vision, **tokens))


@pytest.fixture(scope="module")
def model_dirs(tmp_path_factory):
    from transformers import AutoProcessor

    processor = AutoProcessor.from_pretrained(resolve("builtin:shapes-vlm"))
    root = tmp_path_factory.mktemp("vlm")
    dirs = {}
    for arch in ARCHS:
        model = _tiny_model(arch, processor)
        model.generation_config.eos_token_id = processor.tokenizer.eos_token_id
        model.generation_config.pad_token_id = processor.tokenizer.pad_token_id
        model.save_pretrained(root / arch)
        processor.save_pretrained(root / arch)
        dirs[arch] = str(root / arch)
    return dirs


@pytest.fixture(scope="module")
def rows():
    return shapes_vqa_rows(3, seed=0)


def make_policy(model_dirs, arch="qwen2_vl", **overrides) -> object:
    config = VLMPolicyConfig(model=model_dirs[arch], max_new_tokens=6, min_pixels=24 * 24, max_pixels=48 * 48)
    for key, value in overrides.items():
        setattr(config, key, value)
    return build_policy(config, "cpu")


def test_policy_satisfies_the_protocol(model_dirs):
    assert isinstance(make_policy(model_dirs), Policy)


@pytest.mark.parametrize("arch", ARCHS)
def test_rollout_carries_per_sample_images_and_score_is_micro_batch_invariant(model_dirs, rows, arch):
    policy = make_policy(model_dirs, arch, rollout_batch_size=4, temperature=0.9)
    rollout = policy.rollout(rows, group_size=3)
    assert len(rollout) == 9 and rollout.group_ids.tolist() == [0, 0, 0, 1, 1, 1, 2, 2, 2]
    # 48 x 48 images with 6-pixel patches: one [1, 8, 8] grid and 64 patch rows per sample.
    patch_dim = 3 * 2 * policy.patch_size**2
    assert all(g.tolist() == [[1, 8, 8]] for g in rollout.per_sample["image_grid_thw"])
    assert all(p.shape == (64, patch_dim) for p in rollout.per_sample["pixel_values"])
    assert rollout.rows[0]["image_sizes"] == [(48, 48)] and rollout.rows[0]["image_input_sizes"] == [(48, 48)]
    with torch.no_grad():
        whole = policy.score(rollout).logp
        again = policy.score(rollout).logp
        pieces = torch.cat([policy.score(rollout.select(idx)).logp for idx in ([0, 1], [2, 3, 4, 5], [6, 7, 8])])
    assert torch.equal(whole, again)
    assert (whole - pieces).abs().max().item() <= 1e-6
    assert torch.all(whole[rollout.action_mask == 0] == 0)
    assert (whole - rollout.old_logp).abs().max().item() < 1e-4  # behaviour log-probs from generate's KV cache


def test_vision_placeholder_tokens_are_never_sampled(model_dirs, rows):
    """A model that prefers <|image_pad|> everywhere still yields completions without vision tokens, and they score
    (a sampled <|image_pad|> made the forward pass fail: "Image features and image tokens do not match")."""
    policy = make_policy(model_dirs, rollout_batch_size=6)
    config = policy.hf_model.config
    suppressed = vision_token_ids(config)
    assert suppressed == tuple(sorted({config.image_token_id, config.video_token_id, config.vision_start_token_id,
                                       config.vision_end_token_id}))  # fmt: skip
    head = policy.model.get_output_embeddings()
    biased = torch.nn.Linear(head.in_features, head.out_features, bias=True)
    with torch.no_grad():
        biased.weight.copy_(head.weight)
        biased.bias.zero_()
        biased.bias[list(suppressed)] = 50.0  # every vision token would win by e^50 without the suppression
    policy.model.set_output_embeddings(biased)
    rollout = policy.rollout(rows, group_size=2)
    sampled = rollout.per_sample["completion_ids"][rollout.action_mask.bool()]
    assert sampled.numel() > 0 and not torch.isin(sampled, torch.tensor(suppressed)).any()
    with torch.no_grad():
        logp = policy.score(rollout).logp  # [N, T]
    assert torch.isfinite(logp).all()


def test_suppressed_head_shares_the_weight_and_masks_only_the_named_tokens():
    torch.manual_seed(0)
    head = torch.nn.Linear(4, 6, bias=False)
    masked = suppressed_head(head, (1, 4))
    assert type(masked) is torch.nn.Linear and masked.weight is head.weight  # fused log-prob path, shared grads
    hidden = torch.randn(3, 4)  # [B, H]
    logits, plain = masked(hidden), head(hidden)  # [B, V]
    assert torch.equal(logits[:, [0, 2, 3, 5]], plain[:, [0, 2, 3, 5]])
    assert torch.allclose(logits[:, [1, 4]], plain[:, [1, 4]] - 1.0e4)
    assert torch.softmax(logits, -1)[:, [1, 4]].max().item() == 0.0
    assert suppressed_head(head, ()) is head


def test_group_repetition_and_reordering_keep_each_samples_images(model_dirs, rows):
    policy = make_policy(model_dirs)
    rollout = policy.rollout(rows, group_size=2)
    with torch.no_grad():
        whole = policy.score(rollout).logp
        # repeat sample 4 (third prompt) and put it first: its patches must travel with it
        picked = policy.score(rollout.select([4, 4, 0])).logp
    assert torch.equal(rollout.select([4, 0]).per_sample["pixel_values"][0], rollout.per_sample["pixel_values"][4])
    assert (picked[0] - whole[4]).abs().max().item() <= 1e-6
    assert (picked[1] - whole[4]).abs().max().item() <= 1e-6
    assert (picked[2] - whole[0]).abs().max().item() <= 1e-6


@pytest.mark.parametrize("arch", ARCHS)
def test_one_training_step_on_cpu_with_on_policy_ratio_exactly_one(model_dirs, rows, arch):
    policy = make_policy(model_dirs, arch)
    rollout = policy.rollout(rows[:2], group_size=2)
    for module in policy.modules_to_train():
        module.train()
    with torch.no_grad():
        old_logp = policy.score(rollout).logp  # the trainer's re-score before the update
    logp = policy.score(rollout).logp
    ratio = torch.exp(logp - old_logp)  # [N, T]
    assert torch.equal(ratio.detach(), torch.ones_like(ratio))
    advantages = torch.tensor([1.0, -1.0, 0.5, -0.5])
    mask = rollout.action_mask
    loss = -(ratio * advantages[:, None] * mask).sum() / mask.sum()
    optimizer = torch.optim.AdamW(policy.trainable_parameters(), lr=1e-2)
    before = [p.detach().clone() for p in policy.trainable_parameters()]
    loss.backward()
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in vision_tower(policy.model).parameters())
    optimizer.step()
    changed = sum(not torch.equal(b, p.detach()) for b, p in zip(before, policy.trainable_parameters()))
    assert changed > 0
    with torch.no_grad():
        assert not torch.equal(policy.score(rollout).logp, old_logp)


def test_several_images_per_prompt_and_text_only_rows(model_dirs):
    policy = make_policy(model_dirs)
    two = [Image.new("RGB", (48, 48), (200, 30, 30)), Image.new("RGB", (36, 24), (30, 30, 200))]
    batch = [
        {"prompt": "<image> left, <image> right: which is red?", "image": two},
        {"prompt": "How many red circles are there?", "image": None},
        {"prompt": "How many blue squares are there?", "image": two[1]},
    ]
    rollout = policy.rollout(batch, group_size=2)
    grids = rollout.per_sample["image_grid_thw"]
    assert grids[0].tolist() == [[1, 8, 8], [1, 4, 6]]  # 48x48 and 36x24 in 6-pixel patches
    assert rollout.per_sample["pixel_values"][0].shape[0] == 64 + 24
    assert grids[2].shape == (0, 3) and rollout.per_sample["pixel_values"][2].shape[0] == 0
    assert rollout.rows[0]["image_input_sizes"] == [(48, 48), (36, 24)]
    with torch.no_grad():
        whole = policy.score(rollout).logp
        parts = torch.cat([policy.score(rollout.select([i])).logp for i in range(len(rollout))])
    assert (whole - parts).abs().max().item() <= 1e-6


def test_image_marker_count_must_match_images(model_dirs):
    policy = make_policy(model_dirs)
    image = Image.new("RGB", (48, 48))
    with pytest.raises(ValueError, match=r"row 1: the prompt has 2 '<image>' markers but the row has 1 image"):
        policy.rollout([{"prompt": "q", "image": image}, {"prompt": "<image> and <image>?", "image": image}], 1)
    chat = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "what?"}]}]
    with pytest.raises(ValueError, match=r"row 0: the chat prompt has 1 image block\(s\) but the row has 2"):
        policy.rollout([{"prompt": chat, "image": [image, image]}], 1)


def test_corrupt_and_missing_image_files_name_the_row_and_path(model_dirs, tmp_path):
    policy = make_policy(model_dirs)
    broken = tmp_path / "broken.png"
    broken.write_bytes(b"not a png at all")
    good = {"prompt": "q", "image": Image.new("RGB", (48, 48))}
    with pytest.raises(ImageLoadError, match=r"row 1, column 'image': cannot read image '.*broken\.png'"):
        policy.rollout([good, {"prompt": "q", "image": str(broken)}], 1)
    with pytest.raises(ImageLoadError, match=r"row 0, column 'image': image file '.*missing\.png' does not exist"):
        policy.rollout([{"prompt": "q", "image": str(tmp_path / "missing.png")}], 1)


def test_chat_messages_places_images_where_the_markers_are():
    messages = chat_messages("a <image> b <image>", 2, row_index=0, system_prompt="sys")
    assert messages[0] == {"role": "system", "content": "sys"}
    assert messages[1]["content"] == [
        {"type": "text", "text": "a "},
        {"type": "image"},
        {"type": "text", "text": " b "},
        {"type": "image"},
    ]
    plain = chat_messages("how many?", 2, row_index=0, system_prompt=None)
    assert plain == [
        {"role": "user", "content": [{"type": "image"}, {"type": "image"}, {"type": "text", "text": "how many?"}]}
    ]


def test_split_images_uses_the_grid_sizes():
    grid = torch.tensor([[1, 2, 2], [1, 2, 4], [1, 4, 4]])  # 4, 8 and 16 patches
    flat = torch.arange(28, dtype=torch.float32)[:, None].repeat(1, 3)  # [28, 3]
    first, second, third = split_images(flat, grid, [2, 0, 1])
    assert (
        first[:, 0].tolist() == list(range(12))
        and second.shape == (0, 3)
        and third[:, 0].tolist() == list(range(12, 28))
    )
    joined = concat_images([first, second, third], [grid[:2], grid[:0], grid[2:]])
    assert torch.equal(joined["pixel_values"], flat) and torch.equal(joined["image_grid_thw"], grid)
    with pytest.raises(ValueError, match="covers 28 patches but pixel_values has 27 rows"):
        split_images(flat[:27], grid, [2, 0, 1])


def test_freeze_vision_tower(model_dirs):
    policy = make_policy(model_dirs, freeze_vision_tower=True)
    tower = {id(p) for p in vision_tower(policy.model).parameters()}
    trainable = policy.trainable_parameters()
    assert trainable and not any(id(p) in tower for p in trainable)


@pytest.mark.parametrize("scope", ["language_model", "language_model_and_vision_tower"])
def test_lora_scope_and_reference_with_adapters_disabled(model_dirs, rows, scope, tmp_path):
    targets = ["q_proj", "v_proj", "qkv"]
    policy = make_policy(model_dirs, lora=LoRAConfig(rank=4, alpha=8.0, target_modules=targets), lora_scope=scope)
    names = [n for n, p in policy.model.named_parameters() if p.requires_grad]
    assert names and all("lora_" in n for n in names)
    in_tower = [n for n in names if ".visual." in n]
    assert bool(in_tower) == (scope == "language_model_and_vision_tower")
    rollout = policy.rollout(rows[:1], group_size=2)
    with torch.no_grad():
        out = policy.score(rollout, ScoreRequest.of(kl="k3"))  # fresh LoRA (B = 0): policy == reference
    assert torch.allclose(out["kl"], torch.zeros_like(out["kl"]), atol=1e-6)
    with torch.no_grad():
        for p in policy.trainable_parameters():
            p.add_(0.05)
    policy.save(tmp_path / "ckpt")
    assert (tmp_path / "ckpt" / "adapter_model.safetensors").exists()
    reloaded = make_policy(model_dirs, lora=LoRAConfig(rank=4, alpha=8.0, target_modules=targets), lora_scope=scope)
    reloaded.load(tmp_path / "ckpt")
    with torch.no_grad():
        assert torch.equal(policy.score(rollout).logp, reloaded.score(rollout).logp)


def test_frozen_copy_reference_kl_is_zero_before_training(model_dirs, rows):
    policy = make_policy(model_dirs, reference="auto")
    rollout = policy.rollout(rows[:1], group_size=2)
    with torch.no_grad():
        out = policy.score(rollout, ScoreRequest.of("entropy", kl="k2"))
    assert torch.equal(out["kl"], torch.zeros_like(out["kl"]))
    assert out.get("entropy") is not None and torch.all(out["entropy"][rollout.action_mask > 0] > 0)


def test_a_teacher_vlm_scores_the_stored_processor_outputs_like_a_policy_of_its_own(model_dirs, rows):
    """A teacher model of the family (here the other architecture, same processor) is scored through the student's
    pass: the values a policy of the teacher's folder gives for the same stored rollout."""
    from genalign.teachers.build import build_teacher
    from genalign.teachers.config import TeacherConfig

    policy = make_policy(model_dirs, "qwen2_vl")
    rollout = policy.rollout(rows[:2], group_size=2)
    teacher = build_teacher(TeacherConfig(source="model", model=model_dirs["qwen2_5_vl"]), policy, batch_size=3)
    values = teacher.judge(rollout, frozenset({"teacher_scored", "teacher_action_logp"}))
    with torch.no_grad():
        expected = make_policy(model_dirs, "qwen2_5_vl").score(rollout).logp
    torch.testing.assert_close(values["teacher_action_logp"], expected, atol=1e-6, rtol=0)


def test_config_validation_names_the_field():
    with pytest.raises(ValueError, match=r"policy.min_pixels=5000 and policy.max_pixels=100"):
        VLMPolicyConfig(min_pixels=5000, max_pixels=100).validate()
    with pytest.raises(ValueError, match=r"policy.reference='lora_disabled' needs policy.lora.rank > 0"):
        VLMPolicyConfig(reference="lora_disabled").validate()


def test_score_returns_the_vocab_term_of_the_full_suppressed_logits(model_dirs, rows):
    from genalign.algorithms import bind_vocab_term

    policy = make_policy(model_dirs, logprob_chunk_size=5, temperature=0.9)
    rollout = policy.rollout(rows[:2], group_size=2)
    term = bind_vocab_term("distribution_entropy", temperature=1.5)
    with torch.no_grad():
        plain = policy.score(rollout)
    score = policy.score(rollout, ScoreRequest.of(vocab_term=term))
    assert plain.get("vocab_term") is None and torch.equal(score.logp.detach(), plain.logp)
    hf_model = policy.hf_model
    inputs = policy.model_inputs(rollout)
    width = rollout.per_sample["prompt_ids"].shape[1]
    with torch.no_grad():
        hidden = hf_model.model(**inputs, use_cache=False).last_hidden_state[:, width - 1 : -1]  # [n, T, H]
        head = suppressed_head(hf_model.get_output_embeddings(), policy.suppressed_token_ids)
        scaled = head(hidden).float() / 0.9  # [n, T, V] the law generation samples from
        naive = term(scaled.reshape(-1, scaled.shape[-1])).view(scaled.shape[:2]) * rollout.action_mask
    torch.testing.assert_close(score["vocab_term"].detach(), naive, atol=1e-5, rtol=1e-5)
    assert torch.all(score["vocab_term"][rollout.action_mask == 0] == 0)
    score["vocab_term"].sum().backward()
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in policy.trainable_parameters())


def test_capabilities_are_declared_by_the_config():
    from genalign.policies.lm.core import AUTOREGRESSIVE_STRUCTURE
    from genalign.policies.vlm.config import VLM_TEACHER_LIMITS

    # ref_entropy: the reference's entropy, through the same pass as the policy's (genalign.policies.lm.core.score)
    features = frozenset({"entropy", "kl", "ref_logp", "ref_entropy", "vocab_term", "topk_logp", "hidden",
                          "logp_without_image", "visual_similarity", "logp_frames_shuffled",
                          "modality_attention"})  # fmt: skip
    structure = AUTOREGRESSIVE_STRUCTURE  # the causal-LM structure of completions
    teachers = frozenset({"model", "self", "reference"})  # genalign.teachers: no context, no remote
    assert VLMPolicyConfig().capabilities() == PolicyCapabilities(
        False, features | structure, teachers=teachers, teacher_limits=VLM_TEACHER_LIMITS
    )
    no_reference = (features | structure) - {"kl", "ref_logp", "ref_entropy"}
    assert VLMPolicyConfig(reference="none").capabilities().signals == no_reference
    blocks = VLMPolicyConfig(block_markers=["<answer>"]).capabilities().signals
    assert blocks == features | structure | {"block_ids"}


def test_topk_and_hidden_features_equal_the_naive_suppressed_logits(model_dirs, rows):
    policy = make_policy(model_dirs, logprob_chunk_size=3, temperature=0.8)
    rollout = policy.rollout(rows[:2], group_size=2)
    with torch.no_grad():
        plain = policy.score(rollout).logp
        out = policy.score(rollout, ScoreRequest.of("hidden", topk_logp=4))
        width = rollout.per_sample["prompt_ids"].shape[1]
        hidden = policy.hf_model.model(**policy.model_inputs(rollout), use_cache=False).last_hidden_state
        hidden = hidden[:, width - 1 : -1]  # [n, T, H] the backbone states predicting the actions
        head = suppressed_head(policy.hf_model.get_output_embeddings(), policy.suppressed_token_ids)
        full_logits = head(hidden).float()  # [n, T, V] the law generation samples from
    mask = rollout.action_mask[..., None]  # [n, T, 1]
    assert torch.equal(out.logp, plain)
    naive_topk = torch.topk((full_logits / 0.8).log_softmax(-1), 4).values * mask
    torch.testing.assert_close(out["topk_logp"], naive_topk, atol=1e-5, rtol=0)
    torch.testing.assert_close(out["hidden"], hidden * mask, atol=1e-5, rtol=0)
    assert torch.all(out["hidden"][rollout.action_mask == 0] == 0)


def test_rollout_structure_holds_truncation_and_segment_ids_on_request(model_dirs, rows):
    policy = make_policy(model_dirs, max_new_tokens=3)
    plain = policy.rollout(rows[:2], group_size=2)
    assert set(plain.structure) == {"truncated"}
    lengths = plain.action_mask.sum(1)
    ended = torch.tensor(
        [ids[int(n) - 1].item() in policy.eos_token_ids for ids, n in zip(plain.per_sample["completion_ids"], lengths)]
    )
    assert torch.equal(plain.structure.get("truncated"), ~ended)
    assert plain.info["frac_truncated"] == pytest.approx(float((~ended).float().mean()))
    rollout = policy.rollout(rows[:2], group_size=2, request=RolloutRequest(structure=frozenset({"segment_ids"})))
    expected = policy.segments(rollout.per_sample["completion_ids"], rollout.action_mask)
    assert torch.equal(rollout.structure.get("segment_ids"), expected)
    assert rollout.structure.get("segment_ids").shape == rollout.action_mask.shape


def test_state_dict_roundtrip_restores_the_sampler(model_dirs, rows):
    """The VLM sampler's generator is resumable state: a resumed run samples what the killed one would have."""
    policy = make_policy(model_dirs)
    policy.rollout(rows[:1], group_size=2)  # move the generator away from its seed
    buffer = io.BytesIO()
    torch.save(policy.state_dict(), buffer)
    buffer.seek(0)
    state = torch.load(buffer, weights_only=True)
    assert set(state) == {"generator"}
    after_save = policy.rollout(rows, group_size=2)
    resumed = make_policy(model_dirs)
    resumed.load_state_dict(state)
    again = resumed.rollout(rows, group_size=2)
    assert again.outputs == after_save.outputs
    assert torch.equal(again.per_sample["completion_ids"], after_save.per_sample["completion_ids"])


def test_checkpoint_holds_the_processor(model_dirs, tmp_path):
    from transformers import AutoProcessor

    policy = make_policy(model_dirs)
    policy.save(tmp_path / "ckpt")
    assert (tmp_path / "ckpt" / "model.safetensors").exists()
    processor = AutoProcessor.from_pretrained(tmp_path / "ckpt")
    assert processor.tokenizer.get_vocab() == policy.tokenizer.get_vocab()
    assert processor.image_processor.patch_size == policy.patch_size


@pytest.mark.parametrize("scope", ["language_model", "language_model_and_vision_tower"])
def test_all_linear_targets_every_linear_layer_of_the_scope_but_the_head(model_dirs, scope):
    from genalign.policies.vlm import vision_tower
    from genalign.policies.vlm.model import load_model

    base = load_model(VLMPolicyConfig(), model_dirs["qwen2_vl"], torch.device("cpu"))
    tower, head = {id(m) for m in vision_tower(base).modules()}, base.get_output_embeddings()
    everywhere = scope == "language_model_and_vision_tower"
    expected = {
        name
        for name, module in base.named_modules()
        if isinstance(module, torch.nn.Linear) and module is not head and (everywhere or id(module) not in tower)
    }
    policy = make_policy(model_dirs, lora=LoRAConfig(rank=4, target_modules=["all-linear"]), lora_scope=scope)
    adapted = {name for name, module in policy.hf_model.named_modules() if hasattr(module, "lora_A")}
    assert adapted == expected and any(".visual." in name for name in adapted) == everywhere


def test_a_token_judge_fills_token_judgement_from_the_completions_and_rows(model_dirs, rows):
    from genalign.policies.lm.options import TokenJudgeOptions
    from genalign.policies.lm.probes import judge_tokens
    from genalign.registry import Option

    judge = TokenJudgeOptions(judge=Option("reference_diff", {"reference_column": "answer"}), votes=2)
    policy = make_policy(model_dirs, max_new_tokens=4, token_judge=judge)
    assert "token_judgement" in policy.capabilities.signals
    request = RolloutRequest(structure=frozenset({"token_judgement"}))
    rollout = policy.rollout(rows[:2], group_size=2, request=request)
    ids, mask = rollout.per_sample["completion_ids"], rollout.action_mask
    judged = rollout.structure.get("token_judgement")
    torch.testing.assert_close(judged, judge_tokens(policy.tokenizer, ids, mask, rollout.rows, judge))
    assert bool((judged[mask > 0] < 0).any()) and torch.all(judged[mask == 0] == 0)  # an untrained model errs


def test_modality_attention_reads_the_attention_maps_of_the_actions(model_dirs, rows):
    from genalign.policies.lm.internals import eager_attention
    from genalign.policies.lm.logprobs import backbone_output
    from genalign.policies.vlm.attention import fisher_rao, modality_readings

    # hand maps: 2 actions over keys (image, image, text); action 1 moves within the image, not within the text
    attention = torch.tensor([[[0.5, 0.0, 0.5], [0.0, 0.5, 0.5]]])
    readings = modality_readings(attention, torch.tensor([[True, True, False]]), torch.ones(1, 3, dtype=torch.bool))
    torch.testing.assert_close(readings, torch.tensor([[[0.5, 0.0, 0.0], [0.5, math.pi, 0.0]]]))
    assert float(fisher_rao(torch.tensor([0.5, 0.5]), torch.tensor([0.5, 0.5]))) == 0.0
    policy = make_policy(model_dirs, max_new_tokens=3)
    assert "modality_attention" in policy.capabilities.signals
    rollout = policy.rollout(rows[:2], group_size=1)
    out = policy.score(rollout, ScoreRequest(frozenset({"modality_attention"})))
    readings = out["modality_attention"]  # [n, T, 3]
    inputs = policy.model_inputs(rollout)
    with torch.no_grad(), eager_attention(policy.model):
        maps = backbone_output(policy.model, output_attentions=True, **inputs).attentions
    width, mask = rollout.per_sample["prompt_ids"].shape[1], rollout.action_mask
    mean = sum(layer.float().mean(1) for layer in maps) / len(maps)
    image = inputs["input_ids"][0] == policy.image_token_id
    first = mean[0, width - 1]  # the position predicting sample 0's first action
    torch.testing.assert_close(readings[0, 0, 0], first[image].sum() / first.sum(), rtol=1e-4, atol=1e-6)
    assert bool(image.any()) and torch.all(readings[mask == 0] == 0) and torch.all(readings[..., 1:] >= 0)
