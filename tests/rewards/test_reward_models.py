"""``reward_model``: tiny Llama sequence classifiers built from config and saved to tmp_path; every score is checked
against the model's own forward pass on hand-built token ids."""

from __future__ import annotations

import math
import os

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from genalign.policies.lm.tiny import build_tiny_tokenizer
from genalign.rewards import REWARDS
from genalign.rewards.reward_models import RewardModel, class_scores, normalize_scores
from genalign.rewards.runner import call_reward

PROMPTS = ["what is 1 + 1 ?", "what is the answer", "a b", "the answer is"]
COMPLETIONS = ["2", "the answer is 4 . 5 , 6", "c d e f g h i j k", "x"]


def build_reward_model(directory, *, num_labels: int = 1, chat_template: bool = True, seed: int = 0):
    """A tiny random ``LlamaForSequenceClassification`` and the tiny word-level tokenizer, saved to ``directory``."""
    from transformers import AutoModelForSequenceClassification, LlamaConfig

    tokenizer = build_tiny_tokenizer(128)
    if not chat_template:
        tokenizer.chat_template = None
    config = LlamaConfig(
        vocab_size=128,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        num_labels=num_labels,
        pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(seed)
    model = AutoModelForSequenceClassification.from_config(config).eval()
    model.save_pretrained(str(directory))
    tokenizer.save_pretrained(str(directory))
    return directory


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("reward_models")
    return {
        "chat": build_reward_model(root / "chat"),
        "plain": build_reward_model(root / "plain", chat_template=False),
        "two": build_reward_model(root / "two", num_labels=2, seed=1),
    }


def _load(folder):
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    model = AutoModelForSequenceClassification.from_pretrained(str(folder), local_files_only=True).eval()
    return model, AutoTokenizer.from_pretrained(str(folder), local_files_only=True)


def _hand_logits(model, ids: list[int]) -> torch.Tensor:
    """``[K]`` logits of one unpadded sequence."""
    with torch.no_grad():
        return model(input_ids=torch.tensor([ids])).logits[0].float()


def _chat_ids(tokenizer, prompt, completion):
    text = tokenizer.apply_chat_template(
        [{"role": "user", "content": prompt}, {"role": "assistant", "content": completion}], tokenize=False
    )
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def test_registered_and_lazy(folders):
    reward = REWARDS.get("reward_model")(model_path=str(folders["chat"]), device="cpu")
    assert isinstance(reward, RewardModel) and reward.model is None  # nothing loaded before the first call
    reward(PROMPTS[:1], COMPLETIONS[:1])
    model = reward.model
    reward(PROMPTS[:1], COMPLETIONS[:1])
    assert reward.model is model  # loaded once


def test_score_is_the_models_logit_with_the_chat_template(folders):
    model, tokenizer = _load(folders["chat"])
    reward = RewardModel(model_path=str(folders["chat"]), device="cpu")
    expected = [_hand_logits(model, _chat_ids(tokenizer, p, c))[0].item() for p, c in zip(PROMPTS, COMPLETIONS)]
    assert reward(PROMPTS, COMPLETIONS) == pytest.approx(expected, abs=1e-5)
    # chat completions (a list of messages) are scored by the text of the last message
    chat = [[{"role": "assistant", "content": c}] for c in COMPLETIONS]
    assert reward(PROMPTS, chat) == pytest.approx(expected, abs=1e-5)
    # chat_template=False: prompt + separator + completion, with the tokenizer's own special tokens
    plain = RewardModel(model_path=str(folders["chat"]), device="cpu", chat_template=False, separator=" ; ")
    ids = tokenizer(PROMPTS[0] + " ; " + COMPLETIONS[0])["input_ids"]
    assert plain(PROMPTS[:1], COMPLETIONS[:1]) == pytest.approx([_hand_logits(model, ids)[0].item()], abs=1e-5)
    assert plain(PROMPTS[:1], COMPLETIONS[:1])[0] != pytest.approx(expected[0], abs=1e-4)


def test_tokenizer_without_chat_template(folders):
    model, tokenizer = _load(folders["plain"])
    auto = RewardModel(model_path=str(folders["plain"]), device="cpu")  # chat_template=None: plain text
    ids = tokenizer(PROMPTS[1] + "\n" + COMPLETIONS[1])["input_ids"]
    assert auto(PROMPTS[1:2], COMPLETIONS[1:2]) == pytest.approx([_hand_logits(model, ids)[0].item()], abs=1e-5)
    required = RewardModel(model_path=str(folders["plain"]), device="cpu", chat_template=True)
    with pytest.raises(ValueError, match="chat_template=true but the tokenizer has no chat template"):
        required(PROMPTS[:1], COMPLETIONS[:1])


def test_batching_invariance(folders):
    one = RewardModel(model_path=str(folders["chat"]), device="cpu", batch_size=1)
    four = RewardModel(model_path=str(folders["chat"]), device="cpu", batch_size=4)
    three = RewardModel(model_path=str(folders["chat"]), device="cpu", batch_size=3)
    prompts, completions = PROMPTS * 2, COMPLETIONS[::-1] * 2
    reference = one(prompts, completions)
    assert four(prompts, completions) == pytest.approx(reference, abs=1e-5)
    assert three(prompts, completions) == pytest.approx(reference, abs=1e-5)


@pytest.mark.parametrize("side", ["left", "right"])
def test_truncation(folders, side):
    model, tokenizer = _load(folders["chat"])
    reward = RewardModel(model_path=str(folders["chat"]), device="cpu", max_length=5, truncation_side=side)
    ids = _chat_ids(tokenizer, PROMPTS[1], COMPLETIONS[1])
    assert len(ids) > 5
    kept = ids[-5:] if side == "left" else ids[:5]
    assert reward(PROMPTS[1:2], COMPLETIONS[1:2]) == pytest.approx([_hand_logits(model, kept)[0].item()], abs=1e-5)
    reward(PROMPTS, COMPLETIONS)
    metrics = reward.pop_metrics()
    assert metrics["truncated"] == 1 + 4 and metrics["scored"] == 5  # every sample here is longer than 5 tokens
    assert reward.pop_metrics()["truncated"] == 0


def test_normalisation_by_hand(folders):
    path = str(folders["chat"])
    raw = RewardModel(model_path=path, device="cpu")(PROMPTS, COMPLETIONS)
    sigmoid = RewardModel(model_path=path, device="cpu", normalize="sigmoid", scale=2.0, shift=-1.0)
    assert sigmoid(PROMPTS, COMPLETIONS) == pytest.approx([2 / (1 + math.exp(-r)) - 1 for r in raw], abs=1e-6)
    mean = sum(raw) / len(raw)
    std = math.sqrt(sum((r - mean) ** 2 for r in raw) / len(raw))
    standardized = RewardModel(model_path=path, device="cpu", normalize="standardize_batch", shift=0.5)
    expected = [(r - mean) / (std + 1e-6) + 0.5 for r in raw]
    assert standardized(PROMPTS, COMPLETIONS) == pytest.approx(expected, abs=1e-5)
    assert standardized(PROMPTS[:1], COMPLETIONS[:1]) == pytest.approx([0.5])  # a lone sample: 0, then the shift
    scaled = RewardModel(model_path=path, device="cpu", scale=3.0, shift=1.0)
    assert scaled(PROMPTS, COMPLETIONS) == pytest.approx([3 * r + 1 for r in raw], abs=1e-5)


def test_two_label_scores(folders):
    model, tokenizer = _load(folders["two"])
    logits = _hand_logits(model, _chat_ids(tokenizer, PROMPTS[0], COMPLETIONS[0]))  # [2]
    path = str(folders["two"])
    for label in (0, 1):
        other = 1 - label
        prob = math.exp(logits[label]) / (math.exp(logits[0]) + math.exp(logits[1]))
        cases = {"logit": logits[label].item(), "log_odds": (logits[label] - logits[other]).item(), "prob": prob}
        for score, expected in cases.items():
            reward = RewardModel(model_path=path, device="cpu", label_index=label, score=score)
            assert reward(PROMPTS[:1], COMPLETIONS[:1]) == pytest.approx([expected], abs=1e-5), (label, score)
    with pytest.raises(ValueError, match="label_index=2 but the model has 2 label"):
        RewardModel(model_path=path, device="cpu", label_index=2)(PROMPTS[:1], COMPLETIONS[:1])
    with pytest.raises(ValueError, match="score='prob' needs a classifier with >= 2 labels"):
        RewardModel(model_path=str(folders["chat"]), device="cpu", score="prob")(PROMPTS[:1], COMPLETIONS[:1])


def test_class_scores_formula_for_three_labels():
    logits = torch.tensor([[1.0, 2.0, -0.5]])  # [1, 3]
    log_odds = 2.0 - math.log(math.exp(1.0) + math.exp(-0.5))
    assert class_scores(logits, 1, "log_odds").item() == pytest.approx(log_odds)
    total = sum(math.exp(v) for v in (1.0, 2.0, -0.5))
    assert class_scores(logits, 2, "prob").item() == pytest.approx(math.exp(-0.5) / total)
    assert normalize_scores(torch.tensor([1.0, 3.0]), "standardize_batch", 1.0, 0.0).tolist() == pytest.approx(
        [-1.0, 1.0], abs=1e-5
    )


def test_errors_name_the_field(tmp_path, folders):
    with pytest.raises(FileNotFoundError, match=r"model_path=.*not an existing folder; download the model yourself"):
        RewardModel(model_path=str(tmp_path / "missing"))
    with pytest.raises(FileNotFoundError, match="tokenizer_path="):
        RewardModel(model_path=str(folders["chat"]), tokenizer_path=str(tmp_path / "missing"))
    path = str(folders["chat"])
    for bad, match in (
        ({"dtype": "fp16"}, "dtype='fp16' is not valid; use one of 'float32', 'bfloat16', 'float16'"),
        ({"normalize": "zscore"}, "normalize='zscore'"),
        ({"truncation_side": "middle"}, "truncation_side="),
        ({"batch_size": 0}, "batch_size=0"),
        ({"max_length": -1}, "max_length=-1"),
        ({"chat_template": "yes"}, "chat_template='yes'"),
        ({"scale": "big"}, "scale='big' must be a number"),
        ({"device": "tpu"}, "device='tpu'"),
    ):
        with pytest.raises(ValueError, match=match):
            RewardModel(model_path=path, **bad)


def test_through_the_trainers_runner(folders):
    reward = RewardModel(model_path=str(folders["chat"]), device="cpu", batch_size=2)
    values, errors = call_reward("rm", reward, PROMPTS, COMPLETIONS, {"answer": ["2"] * 4})
    assert errors == 0 and values == pytest.approx(reward(PROMPTS, COMPLETIONS), abs=1e-6)
