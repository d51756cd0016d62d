"""genalign: align generative models with rewards through one group-relative policy-optimisation backend.

Submodules: :mod:`genalign.algorithms` (pure tensor functions), :mod:`genalign.policies` (model-family adapters),
:mod:`genalign.schedulers`, :mod:`genalign.pipelines`, :mod:`genalign.rewards`, :mod:`genalign.data`,
:mod:`genalign.trainer` (the recipe) and :mod:`genalign.config`. ``genalign.train(config, train_dataset=...,
rewards=[...])`` trains from Python (docs/coming_from_trl.md).
"""

from typing import Any

__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    """``genalign.train`` (:func:`genalign.trainer.recipe.train`), imported on first use so that ``import genalign``
    stays light."""
    if name == "train":
        from genalign.trainer import train

        return train
    raise AttributeError(f"module 'genalign' has no attribute {name!r}")
