"""Two transformers of one architecture that split the denoising schedule by timestep (Wan2.2 A14B's two experts): the
high-noise expert denoises every step whose timestep is at least the boundary, the low-noise expert the others, as
diffusers' ``WanPipeline`` switches ``transformer`` / ``transformer_2`` at ``boundary_ratio * num_train_timesteps``.

:class:`TimestepExperts` is the one module genalign samples, scores and trains: each call routes every sample to the
expert of its own timestep, so that re-scoring a stored step uses the expert that sampled it (micro-batches that mix
steps of both ranges included). It forwards the parts of a diffusers model's interface that genalign calls (LoRA
adapters, gradient checkpointing, fusing) to both experts, so that LoRA trains on both.
"""

from __future__ import annotations

import copy
from typing import Any

from torch import Tensor, nn


class TimestepExperts(nn.Module):
    """``high`` for timesteps ``>= boundary``, ``low`` below (timesteps in the scheduler's units, sigma x 1000).

    Args:
        high: the high-noise expert (the pipeline's ``transformer``).
        low: the low-noise expert (``transformer_2``); same call signature as ``high``.
        boundary: the switching timestep, ``boundary_ratio * num_train_timesteps``.
    """

    def __init__(self, high: nn.Module, low: nn.Module, boundary: float) -> None:
        super().__init__()
        self.high, self.low, self.boundary = high, low, float(boundary)
        #: diffusers' ``get_parameter_dtype`` skips these names when it finds the compute dtype (Wan keeps its
        #: modulation tables in float32)
        self._keep_in_fp32_modules = list(getattr(high, "_keep_in_fp32_modules", None) or [])
        #: the experts' shared transformer config (an architecture's ``velocity`` may read it)
        self.config = high.config

    def uses_high(self, timestep: Tensor) -> Tensor:
        """``[B]`` bool: the samples whose timestep (``[B]``, or ``[B, L]`` per token: its first entry) is the high
        expert's."""
        per_sample = timestep if timestep.dim() == 1 else timestep[:, 0]
        return per_sample >= self.boundary

    def forward(self, hidden_states: Tensor, timestep: Tensor, return_dict: bool = False, **inputs: Any) -> tuple:
        """The expert's output ``([B, ...],)`` for each sample of ``hidden_states`` ``[B, ...]`` at ``timestep``; the
        other inputs (``encoder_hidden_states`` ``[B, ...]`` ...) are split along with them."""
        if return_dict:
            raise ValueError("TimestepExperts returns tuples only; call it with return_dict=False.")
        high = self.uses_high(timestep)  # [B]
        if bool(high.all()) or not bool(high.any()):
            expert = self.high if bool(high.all()) else self.low
            return expert(hidden_states=hidden_states, timestep=timestep, return_dict=False, **inputs)
        batch = hidden_states.shape[0]
        output: Tensor | None = None
        for expert, rows in ((self.high, high), (self.low, ~high)):
            picked = {k: v[rows] if isinstance(v, Tensor) and v.shape[:1] == (batch,) else v for k, v in inputs.items()}
            part = expert(hidden_states=hidden_states[rows], timestep=timestep[rows], return_dict=False, **picked)[0]
            if output is None:
                output = part.new_zeros((batch, *part.shape[1:]))
            output = output.index_put((rows.nonzero().flatten(),), part)
        return (output,)

    # --------------------------------------------------- the diffusers model interface genalign calls, on both
    @property
    def experts(self) -> dict[str, nn.Module]:
        """The experts by their pipeline component names."""
        return {"transformer": self.high, "transformer_2": self.low}

    @property
    def peft_config(self) -> dict[str, Any]:
        return self.high.peft_config

    def add_adapter(self, adapter_config: Any) -> None:
        """One LoRA adapter of ``adapter_config`` on each expert (two sets of weights, trained together)."""
        self.high.add_adapter(adapter_config)
        self.low.add_adapter(copy.deepcopy(adapter_config))

    def disable_adapters(self) -> None:
        for expert in (self.high, self.low):
            expert.disable_adapters()

    def enable_adapters(self) -> None:
        for expert in (self.high, self.low):
            expert.enable_adapters()

    def enable_gradient_checkpointing(self) -> None:
        for expert in (self.high, self.low):
            expert.enable_gradient_checkpointing()

    def fuse_lora(self, **kwargs: Any) -> None:
        for expert in (self.high, self.low):
            expert.fuse_lora(**kwargs)

    def unload_lora(self) -> None:
        for expert in (self.high, self.low):
            expert.unload_lora()


__all__ = ["TimestepExperts"]
