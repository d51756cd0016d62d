"""Training objectives, one registry (:data:`OBJECTIVES`) and one signature; see
:mod:`genalign.algorithms.objectives.base`."""

from genalign.algorithms.objectives import (  # noqa: F401  (register)
    contrastive,
    likelihood,
    likelihood_free,
    phased,
    preference,
    ratio,
    regression,
    sequential_kl,
)
from genalign.algorithms.objectives.base import OBJECTIVES, objective_hyperparameters
from genalign.algorithms.objectives.likelihood import group_softmax, spg_loss, wd1_loss
from genalign.algorithms.objectives.likelihood_free import nft_loss, optimality_probability

__all__ = [
    "OBJECTIVES",
    "group_softmax",
    "nft_loss",
    "objective_hyperparameters",
    "optimality_probability",
    "spg_loss",
    "wd1_loss",
]
