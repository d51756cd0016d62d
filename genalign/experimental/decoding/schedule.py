"""Co-GRPO [179]: the decoding schedule (how many tokens to commit at each step) as a trainable policy.

Registered as the decoding policy ``count_schedule`` (:data:`~genalign.policies.dlm.base.DECODING_POLICIES`).

The MDP (our reading of [179]'s "unified MDP that jointly incorporates the model and the inference schedule"):
the state at step ``s`` is the partly masked answer ``x_s`` and the step index; the action is the pair ``(y_s,
k_s)``: ``y_s ~ p_θ(· | x_s)`` the tokens the denoiser draws for the masked positions of the block, and
``k_s ~ π_φ(· | s_b, r_s)`` the number of them to commit, given the step within the block ``s_b`` and the ``r_s``
positions of the block still masked. The transition commits the ``k_s`` drawn tokens chosen by the configured
remasking rule (the most confident ones for ``low_confidence``, random ones for ``random``). The policy factorises,
``log π(a_s | x_s) = log p_θ(y_s | x_s) + log π_φ(k_s | s_b, r_s)``, so one group-relative advantage trains both:
the denoiser through the configured likelihood proxy (as without a schedule policy) and ``φ`` through the exact
log-probability of the sampled counts, which enters the action axis as one extra action per step with the same
advantage (its own clipped policy-gradient term, no backpropagation through generation).

``π_φ`` is a table of logits ``φ[s_b, k − 1]`` over counts ``k = 1 .. Bk``, restricted at each step to the counts
that still let the block finish with at least one token per remaining step: ``1 <= k <= r_s − (S_b − s_b − 1)``;
the last step of a block commits what is left (a forced step, no action). It is initialised to LLaDA's schedule
(``φ[s_b, k − 1] = init_logit`` at ``k = tokens_per_step(Bk, S_b)[s_b]``, 0 elsewhere), so training starts from the
heuristic schedule with some exploration. Reading chosen: [179]'s abstract names "how many tokens to decode at each
step" as the schedule; conditioning on the step and the remaining count (an open-loop schedule, no dependence on the
denoiser's confidences) and the table form are this library's choice, as is ``init_logit = 3``. At inference the
schedule takes the most likely count at every step (``policy.decoding_policy_eval: argmax``) or samples it.
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import Tensor, nn

from genalign.policies.dlm.base import DECODING_POLICIES, StepChoice, StepView, masked_categorical_sample
from genalign.schedulers.masked_diffusion import tokens_per_step


def count_bounds(remaining: Tensor, step_in_block: int | Tensor, steps_per_block: int) -> tuple[Tensor, Tensor]:
    """``(low, high)`` of the counts allowed at a step: every remaining step commits at least one token and the
    last step of the block commits all ``remaining`` positions (``low = high = remaining``).

    Args:
        remaining: ``[...]`` long, masked positions of the block before the step.
        step_in_block: ``s_b`` (an int or a ``[...]`` tensor).
    """
    steps_after = steps_per_block - 1 - torch.as_tensor(step_in_block, device=remaining.device)  # [...]
    high = remaining - steps_after  # [...]
    low = torch.where(steps_after == 0, remaining, torch.ones_like(remaining))  # [...]
    return low, high


@DECODING_POLICIES.register(
    "count_schedule",
    formula="k_s ~ softmax(φ[s_b, :]) over 1 <= k <= r_s − (S_b − s_b − 1); log π = log p_θ(y_s | x_s) + "
    "log π_φ(k_s | s_b, r_s), one group-relative advantage for both",
    source="[179] Co-GRPO",
    summary="Trainable per-step unmasking counts (the inference schedule), optimised with the model under one reward.",
)
class CountSchedule(nn.Module):
    """Co-GRPO [179] schedule policy (module docstring): per-step token counts sampled from a trainable table.
    Reading chosen: the MDP and the table parametrisation of the module docstring.

    Args:
        block_length: ``Bk``; steps_per_block: ``S_b``.
        remasking: which drawn tokens fill the count, ``low_confidence`` (most confident first) or ``random``.
        init_logit: logit of LLaDA's count at initialisation (the other counts start at 0).
    """

    def __init__(
        self,
        block_length: int,
        steps_per_block: int,
        *,
        remasking: Literal["low_confidence", "random"] = "low_confidence",
        init_logit: float = 3.0,
    ) -> None:
        super().__init__()
        if remasking not in ("low_confidence", "random"):
            raise ValueError(
                f"policy.remasking={remasking!r} cannot be used with decoding_policy 'count_schedule' (it decides the "
                "counts itself); use 'low_confidence' or 'random'."
            )
        self.block_length, self.steps_per_block, self.remasking = block_length, steps_per_block, remasking
        table = torch.zeros(steps_per_block, block_length)
        for step, count in enumerate(tokens_per_step(block_length, steps_per_block)):
            table[step, count - 1] = float(init_logit)
        #: ``[S_b, Bk]`` logits of committing ``k = 1 .. Bk`` tokens at step ``s_b`` of a block.
        self.count_logits = nn.Parameter(table)

    def _masked_logits(self, logits: Tensor, low: Tensor, high: Tensor) -> Tensor:
        """``logits`` ``[..., Bk]`` with the counts outside ``[low, high]`` at ``-inf``."""
        counts = torch.arange(1, self.block_length + 1, device=logits.device)  # [Bk]
        allowed = (counts >= low.unsqueeze(-1)) & (counts <= high.unsqueeze(-1))  # [..., Bk]
        return logits.masked_fill(~allowed, -torch.inf)

    @torch.no_grad()
    def choose(self, view: StepView, *, greedy: bool, generator: torch.Generator | None) -> StepChoice:
        """Sample (or take the most likely) count, then commit that many candidates by the remasking rule."""
        remaining = view.candidates.sum(1)  # [B]
        low, high = count_bounds(remaining, view.step_in_block, self.steps_per_block)  # [B]
        row = self.count_logits[view.step_in_block].detach().float().expand(remaining.shape[0], -1)  # [B, Bk]
        count = masked_categorical_sample(self._masked_logits(row, low, high), greedy=greedy, generator=generator) + 1
        count = torch.where(remaining > 0, count, 0)  # [B] a finished block (never with the loop's schedule)
        if self.remasking == "random":
            shape = view.candidates.shape
            confidence = torch.rand(shape, generator=generator, device=view.candidates.device, dtype=torch.float64)
        else:
            confidence = view.token_logp.double()  # [B, Bk]
        confidence = confidence.masked_fill(~view.candidates, -torch.inf)
        rank = confidence.argsort(dim=1, descending=True).argsort(dim=1)  # [B, Bk] 0 = most confident
        commit = (rank < count.unsqueeze(1)) & view.candidates  # [B, Bk]
        return StepChoice(commit=commit, record={"count": count, "remaining": remaining})

    def forward(self, records: dict[str, Tensor]) -> tuple[Tensor, Tensor]:
        """``(logp [N, S], decision [N, S])``: ``log π_φ(k_s | s_b, r_s)`` of the recorded counts (with grad), 0 on
        forced steps; ``decision`` 1 where more than one count was allowed.

        Args:
            records: ``count`` and ``remaining`` ``[N, S]`` long, as :meth:`choose` recorded them.
        """
        count, remaining = records["count"], records["remaining"]  # [N, S]
        step_in_block = torch.arange(count.shape[1], device=count.device) % self.steps_per_block  # [S]
        low, high = count_bounds(remaining, step_in_block, self.steps_per_block)  # [N, S]
        decision = high > low  # [N, S]
        logits = self.count_logits.float()[step_in_block].expand(count.shape[0], -1, -1)  # [N, S, Bk]
        logp_all = torch.log_softmax(self._masked_logits(logits, low, torch.maximum(high, low)), dim=-1)
        picked = logp_all.gather(-1, (count - 1).clamp_min(0).unsqueeze(-1)).squeeze(-1)  # [N, S]
        return torch.where(decision, picked, 0.0), decision.float()


__all__ = ["CountSchedule", "count_bounds"]
