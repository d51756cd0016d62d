"""Clip forms, one registry (:data:`CLIP_FORMS`): standard, adaptive, masking and penalty forms; see
:mod:`genalign.algorithms.clip_forms.base`."""

from genalign.algorithms.clip_forms import adaptive, masking, penalty, standard  # noqa: F401  (register)
from genalign.algorithms.clip_forms.base import CLIP_FORMS, ClipForm, ClippedLogRatio

__all__ = ["CLIP_FORMS", "ClipForm", "ClippedLogRatio"]
