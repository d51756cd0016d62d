"""``reward_model``: the score of a sequence-classification reward model (a local Hugging Face folder).

The model (``AutoModelForSequenceClassification``) and its tokenizer are loaded from local folders on the first call,
once; nothing is downloaded. Each sample becomes one text: with the tokenizer's chat template, the conversation
``[user: prompt, assistant: completion]`` rendered without a generation prompt (``chat_template=None`` uses the
template when the tokenizer has one, ``True`` requires it, ``False`` never uses it); otherwise
``prompt + separator + completion``. Texts longer than ``max_length`` tokens lose tokens at the start
(``truncation_side="left"``, default: the end of the completion, where the model reads its score, survives) or at the
end; those samples are counted (``truncated``). Batches of ``batch_size`` are right-padded, so a sample's score does
not depend on what it is batched with.

**Score** of a sample from its logits ``z`` ``[K]`` (``label_index`` = ``l``):

- ``score="logit"``: ``z[l]`` (one-label reward models such as Skywork-Reward or ArmoRM's head: ``l = 0``);
- ``score="log_odds"``: ``log p_l - log(1 - p_l) = z[l] - logsumexp(z[k != l])`` (``z[l] - z[1 - l]`` for two labels);
- ``score="prob"``: ``softmax(z)[l]`` (classifiers with ``K >= 2``, e.g. a toxicity or "helpful" label).

Then ``normalize``: ``"none"``; ``"sigmoid"``: ``sigmoid(s)``; ``"standardize_batch"``: ``(s - mean) / (std + 1e-6)``
over the samples of the call (population std; a lone sample scores 0); and finally ``scale * s + shift``.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any, Literal

from genalign.rewards.base import register_reward
from genalign.rewards.inputs import completion_text
from genalign.rewards.preference_models import existing_folder
from genalign.rewards.remote import Counters, check_choice, check_positive

Device = Literal["auto", "cpu", "cuda"]
DType = Literal["float32", "bfloat16", "float16"]
Normalize = Literal["none", "sigmoid", "standardize_batch"]
Score = Literal["logit", "log_odds", "prob"]
TruncationSide = Literal["left", "right"]
STANDARDIZE_EPS = 1e-6


# ----------------------------------------------------------------------------------------------------------------------
# shared with genalign.rewards.judge
# ----------------------------------------------------------------------------------------------------------------------


def resolve_device(reward: str, device: Device) -> str:
    """``"auto"`` -> ``"cuda"`` when available, else ``"cpu"``; ``"cuda"`` without a GPU raises naming the field."""
    import torch

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"{reward}: device='cuda' but torch sees no GPU; use device: cpu or device: auto.")
    return device


def torch_dtype(dtype: DType):
    import torch

    return {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[dtype]


def check_bool_or_none(reward: str, field: str, value: Any) -> None:
    if value is not None and not isinstance(value, bool):
        raise ValueError(f"{reward}: {field}={value!r} must be true, false or null.")


def wants_chat_template(reward: str, tokenizer: Any, chat_template: bool | None) -> bool:
    """Whether to render with the tokenizer's chat template (``None``: when it has one; ``True``: it must have one)."""
    has_template = getattr(tokenizer, "chat_template", None) is not None
    if chat_template and not has_template:
        raise ValueError(
            f"{reward}: chat_template=true but the tokenizer has no chat template; set chat_template: false (plain "
            "text joined with the separator) or use a tokenizer folder with a chat template."
        )
    return has_template if chat_template is None else chat_template


def pad_batch(sequences: Sequence[Sequence[int]], pad_id: int, *, side: Literal["left", "right"]):
    """``(input_ids [B, T], attention_mask [B, T])`` of token lists padded with ``pad_id`` on ``side``."""
    import torch

    width = max(len(s) for s in sequences)
    ids = torch.full((len(sequences), width), pad_id, dtype=torch.long)  # [B, T]
    mask = torch.zeros((len(sequences), width), dtype=torch.long)  # [B, T]
    for row, tokens in enumerate(sequences):
        span = slice(0, len(tokens)) if side == "right" else slice(width - len(tokens), width)
        ids[row, span] = torch.tensor(list(tokens), dtype=torch.long)
        mask[row, span] = 1
    return ids, mask


def truncate(tokens: list[int], max_length: int | None, side: TruncationSide) -> list[int]:
    """``tokens`` cut to ``max_length`` by dropping tokens on ``side`` (``"left"`` keeps the end)."""
    if max_length is None or len(tokens) <= max_length:
        return tokens
    return tokens[-max_length:] if side == "left" else tokens[:max_length]


def pad_token_id(reward: str, tokenizer: Any) -> int:
    """The tokenizer's padding token id, else its end-of-sequence id; raise when it has neither."""
    for candidate in (tokenizer.pad_token_id, tokenizer.eos_token_id):
        if candidate is not None:
            return int(candidate)
    raise ValueError(f"{reward}: the tokenizer has neither a pad nor an eos token; add a pad token to the tokenizer.")


# ----------------------------------------------------------------------------------------------------------------------
# the score maths
# ----------------------------------------------------------------------------------------------------------------------


def class_scores(logits, label_index: int, score: Score):
    """``[B]`` scores from classifier ``logits`` ``[B, K]`` (module docstring)."""
    import torch

    logits = logits.float()  # [B, K]
    if score == "logit":
        return logits[:, label_index]  # [B]
    log_probs = torch.log_softmax(logits, dim=-1)  # [B, K]
    if score == "prob":
        return log_probs[:, label_index].exp()  # [B]
    others = torch.cat([logits[:, :label_index], logits[:, label_index + 1 :]], dim=-1)  # [B, K-1]
    return logits[:, label_index] - torch.logsumexp(others, dim=-1)  # [B]


def normalize_scores(scores, normalize: Normalize, scale: float, shift: float):
    """``scale * normalize(scores) + shift`` for ``scores`` ``[N]`` (module docstring)."""
    import torch

    scores = scores.double()  # [N]
    if normalize == "sigmoid":
        scores = torch.sigmoid(scores)
    elif normalize == "standardize_batch":
        scores = (scores - scores.mean()) / (scores.std(unbiased=False) + STANDARDIZE_EPS)
    return scale * scores + shift  # [N]


@register_reward(
    "reward_model", source="sequence-classification reward model", path_args=("model_path", "tokenizer_path")
)
class RewardModel:
    """Score of a local ``AutoModelForSequenceClassification`` reward model (module docstring).

    Args:
        model_path: local model folder (``config.json`` + weights).
        tokenizer_path: local tokenizer folder (default: ``model_path``).
        chat_template: render ``[user: prompt, assistant: completion]`` with the tokenizer's chat template
            (null: when it has one).
        separator: between prompt and completion when no chat template is used.
        batch_size: samples per forward pass.
        max_length: tokens kept per sample (null: no truncation).
        truncation_side: ``"left"`` drops the start of long texts, ``"right"`` the end.
        device: ``"auto"`` (a GPU when there is one), ``"cpu"`` or ``"cuda"``.
        dtype: weights and activations; scores are computed in float32 from the logits.
        label_index: the logit the score reads.
        score: ``"logit"``, ``"log_odds"`` or ``"prob"`` of ``label_index`` (the last two need >= 2 labels).
        normalize: ``"none"``, ``"sigmoid"`` or ``"standardize_batch"`` (over the call's samples).
        scale: multiplies the normalised score.
        shift: added last.
    """

    def __init__(
        self,
        *,
        model_path: str,
        tokenizer_path: str | None = None,
        chat_template: bool | None = None,
        separator: str = "\n",
        batch_size: int = 8,
        max_length: int | None = 2048,
        truncation_side: TruncationSide = "left",
        device: Device = "auto",
        dtype: DType = "float32",
        label_index: int = 0,
        score: Score = "logit",
        normalize: Normalize = "none",
        scale: float = 1.0,
        shift: float = 0.0,
    ) -> None:
        name = "reward_model"
        self.model_dir = existing_folder(name, "model_path", model_path)
        self.tokenizer_dir = existing_folder(name, "tokenizer_path", tokenizer_path) if tokenizer_path else None
        check_bool_or_none(name, "chat_template", chat_template)
        if not isinstance(separator, str):
            raise ValueError(f"{name}: separator={separator!r} must be a string.")
        check_positive(name, "batch_size", batch_size, integer=True, minimum=1)
        if max_length is not None:
            check_positive(name, "max_length", max_length, integer=True, minimum=1)
        check_positive(name, "label_index", label_index, integer=True)
        for field, value, options in (("truncation_side", truncation_side, TruncationSide), ("device", device, Device),
                                      ("dtype", dtype, DType), ("score", score, Score),
                                      ("normalize", normalize, Normalize)):  # fmt: skip
            check_choice(name, field, value, options)
        for field, value in (("scale", scale), ("shift", shift)):
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ValueError(f"{name}: {field}={value!r} must be a number.")
        self.chat_template, self.separator = chat_template, separator
        self.batch_size, self.max_length, self.truncation_side = batch_size, max_length, truncation_side
        self.device, self.dtype = device, dtype
        self.label_index, self.score, self.normalize = label_index, score, normalize
        self.scale, self.shift = float(scale), float(shift)
        self.model: Any = None
        self.tokenizer: Any = None
        self._use_chat = False
        self._lock = threading.Lock()
        self._counters = Counters(("scored", "truncated"))

    def _load(self) -> None:
        """Load the model and tokenizer (once) and check the label options against the model's labels."""
        from transformers import AutoModelForSequenceClassification, AutoTokenizer

        device = resolve_device("reward_model", self.device)
        tokenizer = AutoTokenizer.from_pretrained(str(self.tokenizer_dir or self.model_dir), local_files_only=True)
        model = AutoModelForSequenceClassification.from_pretrained(
            str(self.model_dir), local_files_only=True, dtype=torch_dtype(self.dtype)
        )
        num_labels = model.config.num_labels
        if self.label_index >= num_labels:
            raise ValueError(
                f"reward_model: label_index={self.label_index} but the model has {num_labels} label(s); use 0.."
                f"{num_labels - 1}."
            )
        if self.score != "logit" and num_labels < 2:
            raise ValueError(
                f"reward_model: score={self.score!r} needs a classifier with >= 2 labels; this model has one: use "
                "score: logit (with normalize: sigmoid for a probability-like value)."
            )
        if model.config.pad_token_id is None:  # the model finds each sample's last token through the pad id
            model.config.pad_token_id = pad_token_id("reward_model", tokenizer)
        self._use_chat = wants_chat_template("reward_model", tokenizer, self.chat_template)
        self.model, self.tokenizer = model.to(device).eval(), tokenizer

    def text(self, prompt: str, completion: Any) -> str:
        """The text scored for one sample (module docstring); needs the tokenizer loaded."""
        response = completion_text(completion)
        if not self._use_chat:
            return f"{prompt}{self.separator}{response}"
        messages = [{"role": "user", "content": prompt}, {"role": "assistant", "content": response}]
        return self.tokenizer.apply_chat_template(messages, tokenize=False)

    def tokens(self, prompt: str, completion: Any) -> list[int]:
        """The token ids of one sample, truncated to ``max_length`` (a chat template adds its own special tokens)."""
        ids = self.tokenizer(self.text(prompt, completion), add_special_tokens=not self._use_chat)["input_ids"]
        kept = truncate(list(ids), self.max_length, self.truncation_side)
        self._counters.add("truncated", int(len(kept) < len(ids)))
        return kept

    def raw_scores(self, prompts: Sequence[str], completions: Sequence[Any]) -> list[float]:
        """``[N]`` scores before normalisation."""
        import torch

        with self._lock:
            if self.model is None:
                self._load()
        sequences = [self.tokens(p, c) for p, c in zip(prompts, completions, strict=True)]
        device = next(self.model.parameters()).device
        scores: list[float] = []
        with torch.no_grad():
            for start in range(0, len(sequences), self.batch_size):
                ids, mask = pad_batch(sequences[start : start + self.batch_size], self.model.config.pad_token_id,
                                      side="right")  # fmt: skip
                logits = self.model(input_ids=ids.to(device), attention_mask=mask.to(device)).logits  # [B, K]
                scores.extend(class_scores(logits, self.label_index, self.score).tolist())
        return scores

    def __call__(self, prompts: Sequence[str], completions: Sequence[Any], **columns: Sequence[Any]) -> list[float]:
        import torch

        if len(prompts) != len(completions):
            raise ValueError(f"reward_model: {len(prompts)} prompts for {len(completions)} completions.")
        if not completions:
            return []
        raw = torch.tensor(self.raw_scores(prompts, completions), dtype=torch.float64)  # [N]
        self._counters.add("scored", len(completions))
        return normalize_scores(raw, self.normalize, self.scale, self.shift).tolist()

    def pop_metrics(self) -> dict[str, float]:
        """``scored`` and ``truncated`` (samples longer than ``max_length``) since the previous call."""
        return self._counters.pop()
