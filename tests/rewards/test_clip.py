"""clip_score with a tiny random open_clip architecture whose weights are saved to tmp_path (nothing downloaded)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from PIL import Image

pytest.importorskip("open_clip")

from genalign.rewards import REWARDS
from genalign.rewards.clip import ClipScore

TINY_CLIP = {
    "embed_dim": 16,
    "vision_cfg": {"image_size": 32, "layers": 1, "width": 32, "patch_size": 16, "head_width": 16},
    "text_cfg": {"context_length": 77, "vocab_size": 49408, "width": 32, "heads": 2, "layers": 1},
}


@pytest.fixture(scope="module")
def tiny_clip(tmp_path_factory):
    """(config path, weights path, the model the weights come from)."""
    import open_clip

    folder = tmp_path_factory.mktemp("clip")
    config = folder / "genalign-test-tiny-clip.json"
    config.write_text(json.dumps(TINY_CLIP))
    open_clip.add_model_config(config)
    torch.manual_seed(0)
    model = open_clip.create_model("genalign-test-tiny-clip", pretrained=None).eval()
    weights = folder / "weights.pt"
    torch.save({"state_dict": model.state_dict()}, weights)
    return config, weights, model


def _images():
    rng = np.random.default_rng(0)
    return [Image.fromarray(rng.integers(0, 256, (40, 40, 3), dtype=np.uint8), mode="RGB") for _ in range(3)]


def test_clip_score_is_the_cosine_of_the_saved_model(tiny_clip):
    import open_clip

    config, weights, model = tiny_clip
    prompts = ["a red circle", "two blue squares", "a green triangle"]
    images = _images()
    reward = REWARDS.get("clip_score")(model_config=str(config), weights=str(weights), scale=2.0, batch_size=2)
    scores = reward(prompts, images)

    preprocess = open_clip.image_transform(32, is_train=False)
    tokenizer = open_clip.get_tokenizer("genalign-test-tiny-clip")
    with torch.no_grad():
        image_emb = model.encode_image(torch.stack([preprocess(i) for i in images]))
        text_emb = model.encode_text(tokenizer(prompts))
    expected = 2.0 * torch.nn.functional.cosine_similarity(image_emb, text_emb, dim=-1)
    assert scores == pytest.approx(expected.tolist(), abs=1e-5)
    assert all(-2.0 <= s <= 2.0 for s in scores)


def test_clip_score_weights_are_really_loaded(tiny_clip):
    config, weights, _ = tiny_clip
    torch.manual_seed(123)  # a different random initialisation must not matter once weights are loaded
    loaded = ClipScore(model_config=str(config), weights=str(weights))
    random = ClipScore(model_config=str(config), allow_random_weights=True)
    prompts, images = ["a red circle"] * 3, _images()
    assert loaded(prompts, images) != pytest.approx(random(prompts, images))
    torch.manual_seed(7)
    assert ClipScore(model_config=str(config), weights=str(weights))(prompts, images) == loaded(prompts, images)


def test_clip_score_bad_input(tiny_clip, tmp_path):
    config, weights, _ = tiny_clip
    missing = tmp_path / "nope.pt"
    with pytest.raises(FileNotFoundError, match=rf"reward 'clip_score': weights='{missing}' does not exist"):
        ClipScore(model_config=str(config), weights=str(missing))
    with pytest.raises(ValueError, match="reward 'clip_score': weights=None"):
        ClipScore(model_config=str(config))
    with pytest.raises(ValueError, match="model='ViT-Nope' is not an open_clip architecture"):
        ClipScore(model="ViT-Nope", weights=str(weights))
    reward = ClipScore(model_config=str(config), weights=str(weights))
    with pytest.raises(ValueError, match="completion 0 is a PIL image in mode 'RGBA'"):
        reward(["a"], [Image.new("RGBA", (8, 8))])
    with pytest.raises(ValueError, match=r"completion 0 has shape \(2, 8, 8, 3\)"):
        reward(["a"], [np.zeros((2, 8, 8, 3), np.uint8)])
