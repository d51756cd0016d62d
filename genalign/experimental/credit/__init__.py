"""Experimental credit rules: registered into the core registry under their own names (the registry imports this
package the first time it is read)."""

from genalign.experimental.credit import (  # noqa: F401  (register the options)
    blocks,
    calibration,
    discriminative,
    entropy_gates,
    entropy_softmax,
    equalizer,
    hindsight,
    prefix,
    response_level,
    roles,
    sampling,
    segments,
    self_aware,
    shaping,
    subsampling,
    token_statistics,
    token_trees,
    token_weights,
    tree_groups,
    turn_uncertainty,
    turns,
    uncertainty,
    values,
    video_tokens,
)
