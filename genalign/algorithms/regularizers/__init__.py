"""Per-action regularisers, one registry (:data:`REGULARIZERS`): trust-region and vocabulary terms; see
:mod:`genalign.algorithms.regularizers.base`."""

from genalign.algorithms.regularizers import candidates, entropy_shaping, trust  # noqa: F401  (register)
from genalign.algorithms.regularizers.base import (
    REGULARIZERS,
    bind_vocab_term,
    entropy_bonus,
    entropy_from_logits,
)

__all__ = ["REGULARIZERS", "bind_vocab_term", "entropy_bonus", "entropy_from_logits"]
