"""The teacher must read the student's token ids as the same tokens: one check, with the reason in its message.

A teacher scores the token ids the student sampled, as they are. Its tokenizer must therefore map every token string
to the same id as the policy's: the full ``token -> id`` maps (``get_vocab()``, added and special tokens included)
are compared, and its output head must have a row for every id. genalign does not translate between tokenizers: two
tokenizers segment a text differently, so a token of the student has in general no single token of the teacher
whose probability it could be compared with, and any mapping would only be approximate. A mismatch is refused before
the run starts.
"""

from __future__ import annotations

from genalign.errors import UserError
from genalign.policies.base import PeerModel


class VocabularyMismatch(UserError, ValueError):
    """The teacher's tokenizer does not map tokens to the policy's ids (the message says where and why; the CLI shows
    it as a user error, exit code 2)."""


def check_same_vocabulary(student: dict[str, int], teacher: PeerModel, *, field: str) -> None:
    """Raise :class:`VocabularyMismatch` naming ``field`` unless ``teacher``'s tokenizer maps every token to the
    same id as ``student`` (the policy's ``token -> id`` map) and its head scores every id."""
    mine, theirs = student, teacher.vocabulary
    if mine != theirs:
        differing = sorted(token for token in mine.keys() | theirs.keys() if mine.get(token) != theirs.get(token))
        shown = ", ".join(f"{token!r}: {mine.get(token)} vs {theirs.get(token)}" for token in differing[:5])
        raise VocabularyMismatch(
            f"{field}: the teacher's tokenizer ({len(theirs)} tokens) does not map tokens to the same ids as the "
            f"policy's ({len(mine)} tokens); {len(differing)} token(s) differ (policy id vs teacher id, None = "
            f"absent): {shown}. genalign compares the two tokenizers' full token -> id maps because the teacher "
            "scores the student's sampled token ids as they are; with another tokenizer the same id is another "
            "token, and tokens of two segmentations cannot be compared one by one (genalign does not map tokens "
            "between tokenizers). Use a teacher trained with the policy's tokenizer (e.g. a larger model of the "
            "same series), or give the policy's tokenizer folder as algorithm.teacher.tokenizer if the teacher was."
        )
    largest = max(mine.values(), default=-1)
    if teacher.output_size <= largest:
        raise VocabularyMismatch(
            f"{field}: the teacher's output head has {teacher.output_size} rows, but the tokenizer has ids up to "
            f"{largest}; the teacher could not score those tokens. Is the folder's config.json the model's?"
        )


__all__ = ["VocabularyMismatch", "check_same_vocabulary"]
