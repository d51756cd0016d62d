"""Auxiliary objectives added to the policy loss with a fixed weight (experimental tier): an NLL term on the batch's
good samples (GRPO-SR [52]) and a second policy-gradient term on sparse functional tokens (LA-GRPO [310])."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial

import torch
from torch import Tensor

from genalign.algorithms._validation import expand_advantages
from genalign.algorithms.batch import StepBatch
from genalign.algorithms.clip_forms.standard import ppo_clip
from genalign.algorithms.objectives.group_terms import sample_advantages
from genalign.algorithms.regularizers.base import REGULARIZERS, valid_mask
from genalign.algorithms.scores import ScoreOutput


@REGULARIZERS.register(
    "reward_gated_nll",
    needs=("combined_reward",),
    formula="L_it = −logπθ(o_it) on samples with A_i > 0 (min_reward = null) or r_i ≥ min_reward, else 0 "
    "(r: the combined reward); weight regularizer_coef",
    source="[52] GenRec GRPO-SR (GRPO with NLL regularisation)",
    summary="A supervised NLL anchor next to the policy loss, on the batch's good samples, for training stability.",
)
def reward_gated_nll(
    score: ScoreOutput, advantages: Tensor, batch: StepBatch, *, min_reward: float | None = None
) -> Tensor:
    """GRPO-SR's NLL regularisation [52]: next to the GRPO loss, a negative log-likelihood term keeps the policy on
    good outputs and stabilises training (``regularizer_coef`` is its weight).

    Reading chosen: GenRec takes the NLL on its supervised targets (pages of real interactions), which a GRPO batch
    does not hold; genalign takes it on the batch's good samples: those better than their group's mean (``A_i > 0``)
    by default, or those whose combined reward reaches ``min_reward``. A sample source that adds reference solutions
    (``gcpo``) brings supervised targets into the batch, where they are gated like any sample. The term is aggregated
    like the policy loss (``token_mean``: summed over the gated actions, divided by all the batch's actions).

    Args:
        score, advantages, batch: read ``logp`` (grad), ``mask``, the advantages and (``min_reward``)
            ``combined_reward`` ``[N]``.
        min_reward: gate on the combined reward instead of the advantage sign (None: ``A_i > 0``).
    Returns:
        ``[N, T]`` ``−logπθ`` on the gated samples' valid actions, 0 elsewhere.
    """
    mask = valid_mask(score, batch)
    if min_reward is None:
        gate = sample_advantages(advantages, mask) > 0  # [N]
    else:
        reward = batch.require("combined_reward", "reward_gated_nll with min_reward").to(mask.device)
        gate = reward >= min_reward  # [N]; a missing (NaN) reward never passes
    return torch.where(gate[:, None] & (mask > 0), -score.logp, 0.0)  # [N, T]


def _check_token_ids(token_ids: Sequence[int]) -> list[int]:
    ids = list(token_ids) if isinstance(token_ids, list | tuple) else []
    if not ids or any(isinstance(i, bool) or not isinstance(i, int) or i < 0 for i in ids):
        raise ValueError(
            f"token_ids must be a non-empty list of token ids (integers >= 0) of the functional tokens, got "
            f"{token_ids!r}; look them up with the policy's tokenizer, e.g. tokenizer.convert_tokens_to_ids(['<zoom>'])."
        )
    return ids


def _bind_functional_token_anchor(**hp) -> Callable[..., Tensor]:
    """Check the token ids when the config loads (the option has no useful default), then bind."""
    _check_token_ids(hp.get("token_ids", ()))
    return partial(functional_token_anchor, **hp)


@REGULARIZERS.register(
    "functional_token_anchor",
    needs=("action_ids",),
    bind=_bind_functional_token_anchor,
    formula="L_it = −A_it·exp(clip_ppo(ℓ_it)) on actions whose token is in token_ids, else 0 (ℓ = logπθ − logπold); "
    "weight regularizer_coef (static)",
    source="[310] ATLAS LA-GRPO (Latent-Anchored GRPO)",
    summary="A statically weighted second policy-gradient term on sparse functional tokens, so their gradient is "
    "not diluted by the many ordinary tokens.",
)
def functional_token_anchor(
    score: ScoreOutput,
    advantages: Tensor,
    batch: StepBatch,
    *,
    token_ids: Sequence[int] = (),
    eps_low: float = 0.2,
    eps_high: float = 0.2,
) -> Tensor:
    """LA-GRPO [310]: functional tokens (ordinary vocabulary tokens that stand for internal operations, such as a
    ``<zoom>``) are rare among the many text tokens of a response, so a token-mean loss dilutes their gradient. An
    auxiliary objective of fixed weight (``regularizer_coef``) on those tokens alone anchors them with a stronger
    update.

    Reading chosen: the auxiliary objective is the token PPO surrogate ``A·exp(clip(ℓ))`` restricted to the actions
    whose token id is in ``token_ids`` (same clip range as the objective's), so together with a ``clipped_ratio``
    objective a functional token's loss is ``(1 + λ)`` times the PPO loss and every other token's is unchanged; its
    sign follows the advantage, so it never rewards emitting functional tokens for their own sake.

    Args:
        score, advantages, batch: read ``logp`` (grad), ``old_logp``, ``mask``, ``action_ids`` and the advantages.
        token_ids: the ids of the functional tokens.
        eps_low, eps_high: PPO clip range of the auxiliary surrogate.
    Returns:
        ``[N, T]`` the auxiliary loss on functional tokens, 0 elsewhere (grad through ``logp``).
    """
    ids = _check_token_ids(token_ids)
    mask = valid_mask(score, batch)
    actions = batch.require("action_ids", "functional_token_anchor").to(mask.device)
    functional = torch.isin(actions, torch.tensor(ids, device=actions.device)) & (mask > 0)  # [N, T]
    old = batch.require("old_logp", "functional_token_anchor").detach()
    log_ratio = torch.where(mask > 0, score.logp - old, 0.0)  # [N, T]
    adv = expand_advantages(advantages, tuple(mask.shape)).detach().to(log_ratio.dtype)  # [N, T]
    clipped = ppo_clip(log_ratio, adv, eps_low=eps_low, eps_high=eps_high)
    return torch.where(functional, -adv * clipped.log_weight.exp(), 0.0)  # [N, T]
