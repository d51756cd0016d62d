"""The training recipe (:func:`train`) and its components: update, advantages, checkpoints, metrics, evaluation."""

from genalign.trainer.recipe import train

__all__ = ["train"]
