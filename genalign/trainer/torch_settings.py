"""The process-wide torch settings a run asks for (``run.num_threads``, ``run.deterministic``), applied by the
trainer and by the asynchronous rollout process alike."""

from __future__ import annotations

import torch


def apply_torch_settings(num_threads: int | None, deterministic: bool) -> None:
    """Set the intra-op thread count (``None`` or 0: torch's default) and deterministic algorithms (warn-only where an
    operation has no deterministic implementation).

    ``torch.use_deterministic_algorithms`` also configures the compiler, which imports it (about a second of start-up);
    it is called only when the setting changes, so a run with the default (off) never pays for it.
    """
    if num_threads:
        torch.set_num_threads(num_threads)
    current = torch.are_deterministic_algorithms_enabled()
    if current != deterministic or (deterministic and not torch.is_deterministic_algorithms_warn_only_enabled()):
        torch.use_deterministic_algorithms(deterministic, warn_only=True)


__all__ = ["apply_torch_settings"]
