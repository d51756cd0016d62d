"""What the backend asks of a scoring pass and what it gets back: :class:`ScoreRequest` and :class:`ScoreOutput`.

A policy's ``score(rollout, request)`` re-scores stored actions under the current parameters and returns the
log-probabilities plus the per-action features the request names. The feature names (used in registry meta ``needs``
and in a family's capabilities) are the request's field names: ``entropy``, ``kl``, ``vocab_term``, ``topk``,
``hidden``, ``velocity``, ``logit_stats``, ``logp_without_image``, ``visual_similarity``, ``logp_frames_shuffled``. Token-level features are
computed inside the family's chunked head pass, so ``[n, T, V]`` logits never exist. ``n`` samples, ``T`` actions.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from torch import Tensor

#: ``fn(logits [k, V]) -> [k]``: a per-token function of the next-token logits at the sampling temperature.
VocabTerm = Callable[[Tensor], Tensor]


@dataclass(frozen=True)
class ScoreRequest:
    """The features a scoring pass should return besides ``logp``.

    Attributes:
        entropy: per-action entropy of the policy.
        kl_estimator: a KL estimator name (``k1``, ``k2``, ``k3``; flow families compute the closed form in mean space
            for every name): per-action KL to the reference policy. ``None`` = no KL (and no reference pass).
        vocab_term: a per-token function of the next-token logits, evaluated with gradient inside the chunked head pass
            (vocabulary regularisers, :func:`genalign.algorithms.bind_vocab_term`).
        topk: ``k > 0``: the ``k`` largest next-token log-probabilities of each action (detached).
        hidden: the last hidden state that predicts each action (detached).
        velocity: the current, old-model and target velocities of flow-matching points (DiffusionNFT).
        logit_stats: per-action statistics of the raw next-token logits (detached), see ``ScoreOutput.logit_stats``.
        logp_without_image: the log-probability of each action with the images blanked out (detached; families
            with images, VPPO [329]).
        visual_similarity: the similarity of each action's hidden states to the image tokens' (detached; families
            with images, PEPO [129]).
        logp_frames_shuffled: the log-probability of each action with the frames (a sample's images) in another
            order (detached; families with images, Video-KTR [230]).
    """

    entropy: bool = False
    kl_estimator: str | None = None
    vocab_term: VocabTerm | None = None
    topk: int = 0
    hidden: bool = False
    velocity: bool = False
    logit_stats: bool = False
    logp_without_image: bool = False
    visual_similarity: bool = False
    logp_frames_shuffled: bool = False

    def features(self) -> frozenset[str]:
        """The capability names this request needs."""
        wanted = {
            "entropy": self.entropy,
            "kl": self.kl_estimator is not None,
            "vocab_term": self.vocab_term is not None,
            "topk": self.topk > 0,
            "hidden": self.hidden,
            "velocity": self.velocity,
            "logit_stats": self.logit_stats,
            "logp_without_image": self.logp_without_image,
            "visual_similarity": self.visual_similarity,
            "logp_frames_shuffled": self.logp_frames_shuffled,
        }
        return frozenset(name for name, on in wanted.items() if on)


SCORE_FEATURES: tuple[str, ...] = (
    "entropy",
    "kl",
    "vocab_term",
    "topk",
    "hidden",
    "velocity",
    "logit_stats",
    "logp_without_image",
    "visual_similarity",
    "logp_frames_shuffled",
)

#: Channels of ``ScoreOutput.logit_stats`` (last axis).
SELF_CERTAINTY, RAW_LOGIT = 0, 1


@dataclass(frozen=True)
class VelocityPredictions:
    """Flow-matching predictions at ``K`` stored points per sample, for likelihood-free objectives (DiffusionNFT).

    Attributes:
        current: ``[n, K, ...]`` velocity of the current parameters (with grad).
        old: ``[n, K, ...]`` velocity of the "old" parameters (an exponential moving average; constant).
        target: ``[n, K, ...]`` the flow-matching target ``eps - x_0`` (constant).
    """

    current: Tensor
    old: Tensor
    target: Tensor


@dataclass
class ScoreOutput:
    """What ``policy.score`` returns for a (micro-)batch of ``n`` samples; a feature not requested is ``None``.

    Attributes:
        logp: ``[n, T]`` float32 log-probabilities (or likelihood proxies) of the stored actions (with grad).
        entropy: ``[n, T]`` per-action entropy.
        kl: ``[n, T]`` per-action KL to the reference policy (with grad), in the family's natural space.
        vocab_term: ``[n, T]`` float32 value of the request's vocabulary term (with grad, 0 on padding).
        topk_logp: ``[n, T, k]`` the ``k`` largest next-token log-probabilities of each action (detached).
        hidden: ``[n, T, H]`` last hidden state predicting each action (detached).
        velocity: :class:`VelocityPredictions` of flow-matching points.
        logit_stats: ``[n, T, 2]`` float32 (detached): channel :data:`SELF_CERTAINTY` is ``logsumexp(s) − mean_v(s)``
            of the logits ``s`` at the sampling temperature (``KL(uniform ‖ p) + log V``), channel :data:`RAW_LOGIT`
            the raw logit (before the temperature) of the sampled action.
        logp_without_image: ``[n, T]`` float32 (detached) log-probabilities of the stored actions from a second pass
            with every image blanked out (same tokens and positions), at the sampling temperature.
        visual_similarity: ``[n, T]`` float32 (detached) mean over the model's layers of the mean cosine similarity
            between the hidden state at each action's token and the hidden states at the image tokens (0 without
            images).
        logp_frames_shuffled: ``[n, T]`` float32 (detached) log-probabilities of the stored actions from a second pass
            with each sample's frames (images) reordered (same tokens and positions), at the sampling temperature.
    """

    logp: Tensor
    entropy: Tensor | None = None
    kl: Tensor | None = None
    vocab_term: Tensor | None = None
    topk_logp: Tensor | None = None
    hidden: Tensor | None = None
    velocity: VelocityPredictions | None = None
    logit_stats: Tensor | None = None
    logp_without_image: Tensor | None = None
    visual_similarity: Tensor | None = None
    logp_frames_shuffled: Tensor | None = None
