"""Per-action regularisers, one registry (:data:`REGULARIZERS`): trust-region, response-weighted KL and vocabulary
terms; see :mod:`genalign.algorithms.regularizers.base`."""

from genalign.algorithms.regularizers import (  # noqa: F401  (register)
    candidates,
    entropy_shaping,
    response_weighted,
    trust,
)
from genalign.algorithms.regularizers.base import (
    REGULARIZERS,
    bind_reference_vocab_term,
    bind_vocab_term,
    entropy_bonus,
    entropy_from_logits,
)

__all__ = [
    "REGULARIZERS",
    "bind_reference_vocab_term",
    "bind_vocab_term",
    "entropy_bonus",
    "entropy_from_logits",
]
