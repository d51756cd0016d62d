"""``algorithm.teacher.distribution``: the anchor model and the logit extrapolation of the full-distribution teacher
pass (:mod:`genalign.teachers.distribution`); light, read at config load."""

from __future__ import annotations

from dataclasses import dataclass, field

#: the floor of the adaptive extrapolation weight (the published code's 1e-3)
ADAPTIVE_FLOOR = 1e-3


def _help(text: str, default=None, *, path: bool = False):
    metadata = {"help": text} | ({"path": True, "hub_id": True} if path else {})
    return field(default=default, metadata=metadata)


@dataclass
class DistributionOptions:
    """``algorithm.teacher.distribution``: an anchor model and the logit extrapolation of the teacher (module
    docstring)."""

    anchor: str | None = _help(
        "'reference' (the policy's reference weights), a model folder of the policy's family (e.g. a reverse-DPO "
        "model, [85]) or null: the second model of teacher_anchor_logp and of the extrapolation.",
        path=True,
    )
    extrapolation: float | None = _help(
        "β₂ > 0: the teacher becomes softmax(s_T + w·(s_T − s_anchor)) ([85] AlignDistil); null: the teacher model "
        "itself."
    )
    adaptive: bool = _help("w_t = β₂·Σ_v|π_T − π_anchor| + 1e-3 per token ([85]); false: w = β₂.", True)
    chunk_size: int = _help("Action positions whose [chunk, V] logits (per model) exist at once in the pass.", 128)

    def validate(self) -> None:
        """An extrapolation needs an anchor and is positive; the chunk holds a token."""
        if self.extrapolation is not None and (self.anchor is None or not self.extrapolation > 0):
            raise ValueError(
                f"distribution.extrapolation = {self.extrapolation!r} needs distribution.anchor (the model the teacher's "
                "logits are extrapolated away from) and a value > 0."
            )
        if self.chunk_size < 1:
            raise ValueError(f"distribution.chunk_size = {self.chunk_size} must be >= 1.")
        if self.anchor == "":
            raise ValueError("distribution.anchor = '' names no model: give 'reference', a model folder or null.")

    def check_source(self, source: str) -> None:
        """An anchor belongs to a local teacher (``source`` model or self)."""
        if self.anchor is not None and source == "remote":
            raise ValueError(
                "distribution.anchor needs a local teacher (source 'model' or 'self'): a remote teacher returns "
                "action log-probs only; remove distribution.anchor or change source."
            )

    @property
    def extrapolates(self) -> bool:
        return self.extrapolation is not None


__all__ = ["ADAPTIVE_FLOOR", "DistributionOptions"]
