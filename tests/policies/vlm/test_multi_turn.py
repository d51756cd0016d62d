"""Multi-turn rollouts of the VLM family (``policy.multi_turn``): image observations flow into the next turn (the
processor's expansion of each image, the trajectory's images in sequence order, the image tokens typed for the 3-D
rotary positions), the tokens and images scored are those sampled, the behaviour log-probs are re-scored to float
rounding and exactly across micro-batch splits, environment tokens get no gradient, and an image the model cannot be
shown is counted without stopping the run."""

from __future__ import annotations

import itertools
import json
import os

import pytest
import torch
from PIL import Image

from genalign.config import from_dict, load_config
from genalign.config.schema import TrainConfig
from genalign.data.vlm_tasks import shapes_vqa_rows
from genalign.policies.base import RolloutRequest, ScoreRequest
from genalign.policies.lm.multi_turn_options import MultiTurnOptions
from genalign.policies.vlm.config import VLMPolicyConfig
from genalign.policies.vlm.inputs import encode_text
from genalign.policies.vlm.policy import build_policy

os.environ.setdefault("HF_HUB_OFFLINE", "1")
torch.set_num_threads(1)
HERE = "tests.policies.vlm.scripted_environments"
ROWS = shapes_vqa_rows(2, 0, kinds=["count"], colors=["red"], shape_kinds=["circle"])
STRUCTURE = RolloutRequest(structure=frozenset({"turn_ids", "turn_rewards", "tool_calls", "truncated"}))
IMAGE, PAD = "<|image_pad|>", "<|endoftext|>"


def make_policy(environments, *, freeze_vision_tower=True, **options):
    config = VLMPolicyConfig(min_pixels=256, max_pixels=2304, max_new_tokens=5, temperature=2.0,
                             freeze_vision_tower=freeze_vision_tower,
                             multi_turn=MultiTurnOptions(environments=environments, **options))  # fmt: skip
    return build_policy(config, "cpu")


class Recorder:
    """Wraps ``policy.generate_with_images`` and keeps, per call and row, the context ids, the images and the
    sampled ids."""

    def __init__(self, policy):
        self.inner, self.calls = policy.generate_with_images, []

    def __call__(self, ids, mask, types, media, params):
        generations = self.inner(ids, mask, types, media, params)
        sampled = [row for g in generations for row in zip(g.completion_ids.tolist(), g.completion_mask.tolist())]
        self.calls.append([
            {"context": ids[i][mask[i] > 0].tolist(), "types": types[i][mask[i] > 0].tolist(),
             "pixels": media[i]["pixel_values"], "grid": media[i]["image_grid_thw"].tolist(),
             "sampled": [t for t, m in zip(*sampled[i]) if m]}
            for i in range(ids.shape[0])
        ])  # fmt: skip
        return generations


def scores(policy, rollout, parts=1, request=ScoreRequest()):
    bounds = torch.linspace(0, len(rollout), parts + 1).long().tolist()
    with torch.no_grad():
        return torch.cat(
            [policy.score(rollout.select(range(a, b)), request).logp for a, b in itertools.pairwise(bounds)]
        )


@pytest.fixture(scope="module")
def cropped():
    """A policy with the scripted crop environment, its rollout of 2 rows x 2, and what each turn was sampled on."""
    policy = make_policy(f"{HERE}:ScriptedCrop")
    policy.generate_with_images = recorder = Recorder(policy)
    return policy, policy.rollout(ROWS, 2, request=STRUCTURE), recorder.calls


def test_the_tokens_and_images_scored_are_those_each_turn_was_sampled_on(cropped):
    policy, rollout, calls = cropped
    ps, mask = rollout.per_sample, rollout.action_mask > 0
    decode = lambda ids: policy.tokenizer.decode(ids, skip_special_tokens=False)  # noqa: E731
    assert len(calls) == 3 and all(len(call) == 4 for call in calls), "3 turns of all 4 trajectories"
    assert rollout.counts["tools/ok"] == 8 and rollout.structure["tool_calls"].tolist() == [2, 2, 2, 2]
    for i in range(len(rollout)):
        prompt = ps["prompt_ids"][i][ps["prompt_mask"][i] > 0].tolist()
        completion = ps["completion_ids"][i][ps["completion_attention"][i] > 0].tolist()
        assert ps["completion_ids"][i][mask[i]].tolist() == [t for call in calls for t in call[i]["sampled"]]
        for call in calls:  # each turn saw exactly a prefix of the scored sequence, with its images so far
            context = call[i]["context"]
            assert context == (prompt + completion)[: len(context)]
            assert call[i]["types"] == [int(t == policy.image_token_id) for t in context]
            assert torch.equal(call[i]["pixels"], ps["pixel_values"][i][: call[i]["pixels"].shape[0]])
        # the prompt's 48x48 image (8x8 patches), the 2x zoomed top-left quarter (48x48), the left half (24x48)
        assert [call[i]["grid"] for call in calls] == [[[1, 8, 8]], [[1, 8, 8]] * 2, [[1, 8, 8]] * 2 + [[1, 8, 4]]]
        assert ps["image_grid_thw"][i].tolist() == calls[2][i]["grid"]
        assert torch.equal(ps["pixel_values"][i], calls[2][i]["pixels"])
        # the environment's tokens after turn 0: the tool message as the template renders it, each image placeholder
        # expanded by the processor to the crop's 16 tokens
        turn0 = calls[0][i]["sampled"]
        answer = completion[len(turn0) : len(calls[1][i]["context"]) - len(prompt)]
        close = "\n" if decode(turn0).endswith("<|im_end|>") else "<|im_end|>\n"
        assert decode(answer) == (f"{close}<|im_start|>tool\n<|vision_start|>{IMAGE * 16}<|vision_end|>Crop of pixels "
                                  "(0, 0)-(24, 24), shown at 48x48.<|im_end|>\n<|im_start|>assistant\n")  # fmt: skip
        assert completion.count(policy.image_token_id) == 16 + 8 and prompt.count(policy.image_token_id) == 16
    assert rollout.rows[0]["image_sizes"] == [(48, 48)] and rollout.rows[0]["image_input_sizes"] == [(48, 48)]


def test_the_first_ratio_is_one_and_scores_do_not_depend_on_the_split(cropped):
    policy, rollout, _ = cropped
    mask = rollout.action_mask > 0
    whole = scores(policy, rollout)
    assert torch.equal(whole, scores(policy, rollout)), "re-scoring is exact: the first ratio is exactly 1"
    assert torch.equal(whole, scores(policy, rollout, parts=2)) and torch.equal(whole, scores(policy, rollout, parts=4))
    assert bool((whole[~mask] == 0).all()) and bool((rollout.old_logp[~mask] == 0).all())
    # the sampler's log-probs (KV cache) are the scored ones up to float rounding: same tokens, images and positions
    assert torch.allclose(whole[mask], rollout.old_logp[mask], atol=1e-4)


def test_the_images_matter_and_only_the_multi_turn_features_are_offered(cropped):
    policy, rollout, _ = cropped
    mask = rollout.action_mask > 0
    signals = policy.capabilities.signals
    assert {"turn_ids", "turn_rewards", "tool_calls", "logp_without_image"} <= signals
    assert not {"visual_similarity", "logp_frames_shuffled", "block_ids"} & signals
    with torch.no_grad():
        out = policy.score(rollout, ScoreRequest.of("logp_without_image"))
    blank = out.features["logp_without_image"]
    assert bool((blank[~mask] == 0).all()) and not torch.allclose(blank[mask], out.logp[mask], atol=1e-3)


def test_a_huge_advantage_on_environment_tokens_gives_no_gradient():
    policy = make_policy(f"{HERE}:ScriptedCrop", freeze_vision_tower=False)
    rollout = policy.rollout(ROWS[:1], 2)
    environment = (rollout.per_sample["completion_attention"] > 0) & (rollout.action_mask == 0)
    assert bool(environment.any())
    policy.model.train()

    def gradients(advantages):
        policy.model.zero_grad()
        out = policy.score(rollout, ScoreRequest.of("entropy"))
        (-(advantages * out.logp).sum() - (advantages * out.features["entropy"]).sum()).backward()
        return {n: p.grad.clone() if p.grad is not None else torch.zeros_like(p)
                for n, p in policy.model.named_parameters() if p.requires_grad}  # fmt: skip

    on_environment = gradients(torch.where(environment, 1e9, 0.0))
    assert all(bool((g == 0).all()) for g in on_environment.values()), "environment tokens carry no gradient"
    on_model = gradients((rollout.action_mask > 0).float())
    assert any(bool((g != 0).any()) for n, g in on_model.items() if ".visual." in n), "the images reach the loss"


def test_a_first_observation_with_an_image_follows_the_row_image_in_the_prompt():
    policy = make_policy(f"{HERE}:FirstLook", max_turns=1)
    rollout = policy.rollout(ROWS[:1], 1)
    ps = rollout.per_sample
    prompt = policy.tokenizer.decode(ps["prompt_ids"][0][ps["prompt_mask"][0] > 0].tolist())
    assert prompt == (f"<|im_start|>user\n<|vision_start|>{IMAGE * 16}<|vision_end|>{ROWS[0]['prompt']}\n\n"
                      f"<|vision_start|>{IMAGE * 4}<|vision_end|>A closer look.<|im_end|>\n<|im_start|>assistant\n")  # fmt: skip
    assert ps["image_grid_thw"][0].tolist() == [[1, 8, 8], [1, 4, 4]]  # the row's 48x48 image, then a 24x24 crop
    assert rollout.rows[0]["image_sizes"] == [(48, 48)], "the row's images only (rewards index them)"
    assert torch.equal(ps["mm_token_type_ids"][0], (ps["prompt_ids"][0] == policy.image_token_id).long())


def test_an_image_the_model_cannot_be_shown_is_counted_and_never_stops_the_run():
    policy = make_policy(f"{HERE}:UnreadableImage")
    rollout = policy.rollout(ROWS, 2, request=STRUCTURE)
    assert rollout.counts["environment_errors/observation"] == 4 and rollout.structure["truncated"].all()
    assert rollout.counts["turns"] == 4 and "does not exist" in policy.environment_failures[-1]
    assert torch.equal(rollout.per_sample["completion_attention"], rollout.action_mask), "nothing appended"


def test_a_template_that_drops_image_blocks_is_refused_with_the_fix():
    policy = make_policy(f"{HERE}:ScriptedCrop")
    with pytest.raises(ValueError, match=r"rendered 0 image placeholder\(s\).*1 image\(s\).*chat template"):
        encode_text(policy.processor, "<|im_start|>tool\nCrop<|im_end|>\n", [Image.new("RGB", (48, 48))], policy.config)


def test_config_errors_name_the_field():
    with pytest.raises(ValueError, match=r"max_total_tokens=5 must exceed policy.max_new_tokens=5"):
        VLMPolicyConfig(max_new_tokens=5, multi_turn=MultiTurnOptions(environments="image_zoom", max_total_tokens=5)).validate()  # fmt: skip
    data = {"policy": {"family": "vlm", "multi_turn": {"environments": "image_zoom", "max_turn": 2}},
            "data": {"train": {"source": "procedural:shapes_vqa", "args": {"size": 4}}},
            "rewards": [{"fn": "count_accuracy"}]}  # fmt: skip
    with pytest.raises(ValueError, match=r"max_turn.*max_turns"):
        from_dict(TrainConfig, data)


def test_the_zoom_demo_trains_two_steps(tmp_path):
    """configs/demo_shapes_vlm_zoom.yaml, shrunk: 2 steps of 2 prompts x 2 trajectories, each through a review, and a
    final evaluation whose accuracy is the environment's reward."""
    from genalign.trainer.recipe import train

    overrides = ["algorithm.prompts_per_step=2", "algorithm.group_size=2", "algorithm.micro_batch_size=4",
                 "policy.max_new_tokens=8", "data.train.args.size=8", "data.eval.args.size=2", "eval.num_prompts=2",
                 "eval.batch_size=2", "eval.at_start=false", "run.max_steps=2", "run.sample_every=0",
                 f"run.output_dir={tmp_path / 'run'}"]  # fmt: skip
    train(load_config("configs/demo_shapes_vlm_zoom.yaml", overrides))
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in records if "rollout/turns" in r]
    assert [r["step"] for r in steps] == [1, 2]
    assert all(r["rollout/turns"] == 8 and r["rollout/trajectories"] == 4 for r in steps), "a review each"
    (evaluation,) = [json.loads(line) for line in (tmp_path / "run" / "eval.jsonl").read_text().splitlines()]
    assert evaluation["step"] == 2 and evaluation["eval/num_scored"] == 2, "the environment scored both episodes"


def test_turn_level_trees_branch_with_the_images_of_the_prefix():
    """Tree-GRPO [165] on the VLM: 2 branches per row before turn 1; each branch's environment replays turn 0's crop
    (its own crops follow), so both leaves take the 3 scripted turns and hold the prompt's image and 2 crops, the first
    crop (in the shared prefix) identical; the sampled tokens are re-scored to float rounding."""
    from genalign.policies.lm.turn_tree_options import TurnTreeOptions

    tree = TurnTreeOptions(enabled=True, split_turns=[1], branching=[2], trees_per_prompt=1)
    policy = make_policy(f"{HERE}:ScriptedCrop", tree=tree)
    request = RolloutRequest(structure=frozenset({"turn_ids", "prefix_tree"}))
    rollout = policy.rollout(ROWS, 2, request=request)
    ids, mask, turns = rollout.per_sample["completion_ids"], rollout.action_mask > 0, rollout.structure["turn_ids"]
    assert turns.max(dim=1).values.tolist() == [2] * 4 and rollout.counts["tree_branches"] == 2
    for first in (0, 2):
        split = int(((turns[first] == 1) & mask[first]).nonzero()[0])
        assert torch.equal(ids[first, :split], ids[first + 1, :split])
        grids = [rollout.per_sample["image_grid_thw"][i] for i in (first, first + 1)]
        assert grids[0].shape[0] == grids[1].shape[0] == 3
        prefix_pixels = int(grids[0][:2].prod(dim=1).sum())  # the prompt's image and the first crop
        pixels = [rollout.per_sample["pixel_values"][i][:prefix_pixels] for i in (first, first + 1)]
        assert torch.equal(pixels[0], pixels[1])
        tree = rollout.structure["prefix_tree"]
        assert tree.node_of_action[first, split] != tree.node_of_action[first + 1, split]
    torch.testing.assert_close(scores(policy, rollout)[mask], rollout.old_logp[mask], rtol=0, atol=1e-4)
