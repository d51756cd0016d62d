"""Preference-model rewards with tiny random weights saved to tmp_path (nothing is downloaded)."""

from __future__ import annotations

import importlib.util
import json
import os

import numpy as np
import pytest
import torch
from PIL import Image

os.environ.setdefault("HF_HUB_OFFLINE", "1")
pytest.importorskip("open_clip")

from genalign.rewards import REWARDS
from genalign.rewards.preference_models import (
    AestheticScore,
    HPSv2,
    ImageRewardScore,
    PickScore,
    build_aesthetic_mlp,
)

TINY_OPEN_CLIP = {
    "embed_dim": 16,
    "vision_cfg": {"image_size": 32, "layers": 1, "width": 32, "patch_size": 16, "head_width": 16},
    "text_cfg": {"context_length": 77, "vocab_size": 49408, "width": 32, "heads": 2, "layers": 1},
}
PROMPTS = ["a red circle", "two blue squares"]


def _images():
    rng = np.random.default_rng(0)
    return [Image.fromarray(rng.integers(0, 256, (36, 36, 3), dtype=np.uint8), mode="RGB") for _ in PROMPTS]


@pytest.fixture(scope="module")
def open_clip_files(tmp_path_factory):
    """(config path, checkpoint path, model) of a tiny random open_clip model."""
    import open_clip

    folder = tmp_path_factory.mktemp("open_clip")
    config = folder / "genalign-test-tiny-pref-clip.json"
    config.write_text(json.dumps(TINY_OPEN_CLIP))
    open_clip.add_model_config(config)
    torch.manual_seed(1)
    model = open_clip.create_model("genalign-test-tiny-pref-clip", pretrained=None).eval()
    weights = folder / "hps.pt"
    torch.save({"state_dict": model.state_dict()}, weights)
    return config, weights, model


def _embed(model, images, prompts=None):
    import open_clip

    preprocess = open_clip.image_transform(32, is_train=False)
    with torch.no_grad():
        image = torch.nn.functional.normalize(model.encode_image(torch.stack([preprocess(i) for i in images])), dim=-1)
        if prompts is None:
            return image
        tokens = open_clip.get_tokenizer("genalign-test-tiny-pref-clip")(prompts)
        return image, torch.nn.functional.normalize(model.encode_text(tokens), dim=-1)


def test_hpsv2_is_the_cosine_of_the_checkpoint(open_clip_files):
    config, weights, model = open_clip_files
    reward = REWARDS.get("hpsv2")(weights=str(weights), model_config=str(config))
    image, text = _embed(model, _images(), PROMPTS)
    assert reward(PROMPTS, _images()) == pytest.approx((image * text).sum(-1).tolist(), abs=1e-5)


def test_aesthetic_is_the_mlp_on_the_normalised_embedding(open_clip_files, tmp_path):
    config, weights, model = open_clip_files
    torch.manual_seed(2)
    mlp = build_aesthetic_mlp(16).eval()
    mlp_path = tmp_path / "aesthetic.pth"
    torch.save({f"layers.{k}": v for k, v in mlp.state_dict().items()}, mlp_path)
    reward = AestheticScore(mlp_weights=str(mlp_path), clip_weights=str(weights), clip_config=str(config))
    with torch.no_grad():
        expected = mlp(_embed(model, _images())).squeeze(-1)
    assert reward(PROMPTS, _images()) == pytest.approx(expected.tolist(), abs=1e-5)


def test_aesthetic_rejects_a_head_of_the_wrong_width(open_clip_files, tmp_path):
    config, weights, _ = open_clip_files
    mlp_path = tmp_path / "wide.pth"
    torch.save({f"layers.{k}": v for k, v in build_aesthetic_mlp(768).state_dict().items()}, mlp_path)
    with pytest.raises(ValueError, match="expects 768-dim CLIP embeddings but the CLIP model gives 16"):
        AestheticScore(mlp_weights=str(mlp_path), clip_weights=str(weights), clip_config=str(config))


def _tiny_clip_folder(folder):
    from transformers import CLIPConfig, CLIPImageProcessor, CLIPModel, CLIPProcessor, CLIPTokenizer

    letters = "abcdefghijklmnopqrstuvwxyz"
    vocab = {token: i for i, token in enumerate([*letters, *(c + "</w>" for c in letters)])}
    vocab.update({"<|startoftext|>": len(vocab), "<|endoftext|>": len(vocab) + 1})
    (folder / "vocab.json").write_text(json.dumps(vocab))
    (folder / "merges.txt").write_text("#version: 0.2\n")
    tokenizer = CLIPTokenizer(str(folder / "vocab.json"), str(folder / "merges.txt"), pad_token="<|endoftext|>")
    image_processor = CLIPImageProcessor(size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32})
    config = CLIPConfig(
        text_config={
            "vocab_size": len(vocab),
            "hidden_size": 32,
            "intermediate_size": 37,
            "num_hidden_layers": 1,
            "num_attention_heads": 2,
            "eos_token_id": vocab["<|endoftext|>"],
            "bos_token_id": vocab["<|startoftext|>"],
            "pad_token_id": vocab["<|endoftext|>"],
        },
        vision_config={
            "image_size": 32,
            "patch_size": 16,
            "hidden_size": 32,
            "intermediate_size": 37,
            "num_hidden_layers": 1,
            "num_attention_heads": 2,
        },
        projection_dim=16,
    )
    torch.manual_seed(3)
    model = CLIPModel(config).eval()
    model.save_pretrained(folder)
    CLIPProcessor(image_processor=image_processor, tokenizer=tokenizer).save_pretrained(folder)
    return model


def test_pickscore_is_the_scaled_cosine_of_the_saved_model(tmp_path):
    from transformers import CLIPProcessor

    model = _tiny_clip_folder(tmp_path)
    reward = PickScore(model_path=str(tmp_path), batch_size=1)
    scores = reward(PROMPTS, _images())
    processor = CLIPProcessor.from_pretrained(tmp_path)
    with torch.no_grad():
        image = model.get_image_features(**processor(images=_images(), return_tensors="pt"))
        text = model.get_text_features(**processor(text=PROMPTS, padding=True, return_tensors="pt"))
        image = getattr(image, "pooler_output", image)
        text = getattr(text, "pooler_output", text)
        expected = model.logit_scale.exp() * torch.nn.functional.cosine_similarity(image, text, dim=-1)
    assert scores == pytest.approx(expected.tolist(), abs=1e-4)


@pytest.mark.parametrize(
    ("factory", "args", "message"),
    [
        ("pickscore", {"model_path": "/no/such/pickscore"}, "reward 'pickscore': model_path='/no/such/pickscore'"),
        ("hpsv2", {"weights": "/no/such/hps.pt"}, "reward 'hpsv2': weights='/no/such/hps.pt' does not exist"),
        (
            "aesthetic",
            {"mlp_weights": "/no/such/mlp.pth", "clip_weights": "/x"},
            "reward 'aesthetic': mlp_weights='/no/such/mlp.pth' does not exist",
        ),
        (
            "imagereward",
            {"weights": "/no/such/ImageReward.pt", "med_config": "/x.json"},
            "reward 'imagereward': weights='/no/such/ImageReward.pt' does not exist",
        ),
    ],
)
def test_missing_weight_paths_name_the_reward_and_the_argument(factory, args, message):
    with pytest.raises(FileNotFoundError, match=message):
        REWARDS.get(factory)(**args)


@pytest.mark.skipif(importlib.util.find_spec("ImageReward") is not None, reason="image-reward is installed")
def test_imagereward_without_its_package_says_how_to_install(tmp_path):
    weights, config = tmp_path / "ImageReward.pt", tmp_path / "med_config.json"
    weights.write_bytes(b"")
    config.write_text("{}")
    with pytest.raises(ImportError, match="pip install image-reward"):
        ImageRewardScore(weights=str(weights), med_config=str(config))


def test_preference_rewards_reject_non_rgb_images(open_clip_files):
    config, weights, _ = open_clip_files
    reward = HPSv2(weights=str(weights), model_config=str(config))
    with pytest.raises(ValueError, match="reward 'hpsv2': completion 1 is a PIL image in mode 'L'"):
        reward(PROMPTS, [_images()[0], Image.new("L", (8, 8))])
