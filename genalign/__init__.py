"""genalign: align generative models with rewards through one group-relative policy-optimisation backend.

Submodules: :mod:`genalign.algorithms` (pure tensor functions), :mod:`genalign.policies` (model-family adapters),
:mod:`genalign.schedulers`, :mod:`genalign.pipelines`, :mod:`genalign.rewards`, :mod:`genalign.data`,
:mod:`genalign.trainer` (the recipe) and :mod:`genalign.config`.
"""

__version__ = "0.1.0"
