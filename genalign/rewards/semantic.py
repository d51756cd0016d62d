"""``prompt_similarity``: how close a completion stays to its prompt's meaning, the cosine similarity of their
embeddings, for Sem-DPO's semantic weight ([51], objective ``sem_dpo``) or as a reward of its own.

Two embeddings:

* ``encoder: null`` (default): a hashed bag of character n-grams and words (:func:`hashed_ngram_embedding`): no model,
  no download, deterministic across processes (CRC-32 hashing); it sees shared wording and spelling, not paraphrase;
* ``encoder: <folder>``: a local sentence encoder (a transformers encoder folder such as a snapshot of
  ``sentence-transformers/all-MiniLM-L6-v2``; loaded once on the first call, never downloaded), the mean of its last
  hidden states over the text's tokens (:class:`SentenceEncoder`, the pooling of the MiniLM sentence models): Sem-DPO's
  setting.
"""

from __future__ import annotations

import math
import re
import zlib
from collections import Counter
from collections.abc import Sequence
from typing import Any

from genalign.rewards.base import register_reward
from genalign.rewards.inputs import completion_text

_WORD = re.compile(r"\w+")


def hashed_ngram_embedding(text: str, *, n: int = 3, buckets: int = 4096) -> Counter[int]:
    """A sparse bag ``{bucket: count}`` of the lower-cased ``text``'s character ``n``-grams (of each word padded with
    spaces) and whole words, each hashed by CRC-32 into ``buckets`` buckets (a word and an n-gram hash apart)."""
    counts: Counter[int] = Counter()
    for word in _WORD.findall(text.lower()):
        counts[zlib.crc32(b"w:" + word.encode()) % buckets] += 1
        padded = f" {word} "
        for start in range(max(len(padded) - n + 1, 1)):
            counts[zlib.crc32(b"c:" + padded[start : start + n].encode()) % buckets] += 1
    return counts


def cosine(a: Counter[int], b: Counter[int]) -> float:
    """Cosine similarity of two sparse count vectors (0 when either is empty); in [0, 1] for counts."""
    dot = sum(value * b.get(key, 0) for key, value in a.items())
    norm = math.sqrt(sum(v * v for v in a.values())) * math.sqrt(sum(v * v for v in b.values()))
    return dot / norm if norm > 0 else 0.0


class SentenceEncoder:
    """A local transformers encoder folder as a sentence encoder: the mean of the last hidden states over each text's
    tokens (attention mask), in batches, on the CPU or ``device``; loaded on the first call, once."""

    def __init__(self, folder: str, *, device: str = "cpu", batch_size: int = 32, max_length: int = 256) -> None:
        from genalign.rewards.preference_models import existing_folder

        self.folder = existing_folder("prompt_similarity", "encoder", folder)
        self.device, self.batch_size, self.max_length = device, batch_size, max_length
        self.model: Any = None
        self.tokenizer: Any = None

    def __call__(self, texts: Sequence[str]) -> Any:
        """``[N, H]`` float32 mean-pooled embeddings."""
        import torch
        from transformers import AutoModel, AutoTokenizer

        if self.model is None:
            self.tokenizer = AutoTokenizer.from_pretrained(str(self.folder), local_files_only=True)
            self.model = AutoModel.from_pretrained(str(self.folder), local_files_only=True).to(self.device).eval()
        pooled = []
        for start in range(0, len(texts), self.batch_size):
            batch = self.tokenizer(list(texts[start : start + self.batch_size]), padding=True, truncation=True,
                                   max_length=self.max_length, return_tensors="pt").to(self.device)  # fmt: skip
            with torch.no_grad():
                hidden = self.model(**batch).last_hidden_state.float()  # [B, L, H]
            weights = batch["attention_mask"].float()[..., None]  # [B, L, 1]
            pooled.append((hidden * weights).sum(1) / weights.sum(1).clamp_min(1.0))  # [B, H]
        return torch.cat(pooled).cpu() if pooled else torch.zeros(0, 1)


@register_reward("prompt_similarity", source="[51] Sem-DPO (semantic consistency with the original prompt)",
                 path_args=("encoder",))  # fmt: skip
class PromptSimilarity:
    """``cos(e(prompt), e(completion))`` (module docstring): in ``[0, 1]`` with the hashed n-gram embedding, in
    ``[−1, 1]`` with a sentence encoder.

    Args:
        n: character n-gram length (>= 1), hashed embedding.
        buckets: hash buckets of the hashed embedding (>= 64).
        column: a dataset column to compare with instead of the prompt (e.g. the original user prompt when the
            prompt is an instruction around it); None: the prompt.
        encoder: a local sentence-encoder folder (module docstring); None: the hashed embedding.
        device: where the encoder runs.
    """

    def __init__(
        self, *, n: int = 3, buckets: int = 4096, column: str | None = None, encoder: str | None = None,
        device: str = "cpu",
    ) -> None:  # fmt: skip
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ValueError(f"prompt_similarity: n={n!r} must be an integer >= 1 (the character n-gram length).")
        if isinstance(buckets, bool) or not isinstance(buckets, int) or buckets < 64:
            raise ValueError(f"prompt_similarity: buckets={buckets!r} must be an integer >= 64 (e.g. 4096).")
        self.n, self.buckets, self.column = n, buckets, column
        self.encoder = SentenceEncoder(encoder, device=device) if encoder is not None else None

    def __call__(self, prompts: Sequence[str], completions: Sequence[Any], **columns: Sequence[Any]) -> list[float]:
        if self.column is not None and self.column not in columns:
            raise ValueError(
                f"prompt_similarity: column={self.column!r} is not a column of the batch (columns: {sorted(columns)})."
            )
        originals = columns[self.column] if self.column is not None else prompts
        if self.encoder is not None and len(completions):
            import torch.nn.functional as F

            texts = [completion_text(c) for c in completions]
            embedded = self.encoder([str(o) for o in originals] + texts)  # [2N, H]
            pairs = embedded.view(2, len(texts), -1)
            return F.cosine_similarity(pairs[0], pairs[1], dim=-1).clamp(-1.0, 1.0).tolist()
        return [
            cosine(self._embed(str(original)), self._embed(completion_text(completion)))
            for original, completion in zip(originals, completions, strict=True)
        ]

    def _embed(self, text: str) -> Counter[int]:
        return hashed_ngram_embedding(text, n=self.n, buckets=self.buckets)


__all__ = ["PromptSimilarity", "SentenceEncoder", "cosine", "hashed_ngram_embedding"]
