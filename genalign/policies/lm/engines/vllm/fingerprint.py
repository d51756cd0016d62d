"""Content fingerprints of parameters: decide whether vLLM's copy is stale without keeping a copy of the weights.

Each tensor's bytes, read as integers ``x_i``, are hashed on the tensor's own device as two positional sums
``h = Σ_chunks B^c · (Σ_i w_i · (x_i mod P)) mod P`` with ``P = 2^31 - 1`` and two fixed vectors of random multipliers
``w``. Changing any single element changes ``x_i mod P`` unless the bit patterns differ by a multiple of ``P``, and a
random change leaves both sums equal with probability about ``P^-2``; names, dtypes and shapes are hashed too. The
cost is one pass over the parameters in int64 arithmetic (about tens of ms per billion parameters on a current GPU, an
estimate, not measured here), far below a rollout.

Parameter identities and ``Tensor._version`` counters are not used: under sharded training the full parameters are
re-gathered into new or reused buffers at every rollout, so neither tells reliably whether the values changed.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

import torch
from torch import Tensor

PRIME = 2**31 - 1
BASE = 1_000_003
CHUNK = 1 << 22
_INTEGER_VIEW = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
_MULTIPLIERS: dict[tuple[torch.device, int], Tensor] = {}


def _multipliers(device: torch.device) -> Tensor:
    """``[2, CHUNK]`` int64 multipliers in ``[1, P)``, the same on every device and in every process."""
    key = (device, CHUNK)
    if key not in _MULTIPLIERS:
        generator = torch.Generator().manual_seed(20250101)
        _MULTIPLIERS[key] = torch.randint(1, PRIME, (2, CHUNK), generator=generator, dtype=torch.int64).to(device)
    return _MULTIPLIERS[key]


@torch.no_grad()
def tensor_digest(tensor: Tensor) -> Tensor:
    """``[2]`` int64 positional hashes of ``tensor``'s bytes (on its device; see the module docstring)."""
    flat = tensor.detach().reshape(-1)
    if flat.dtype == torch.bool:
        flat = flat.view(torch.uint8)
    if flat.is_complex():
        flat = torch.view_as_real(flat).reshape(-1)
    bits = flat.view(_INTEGER_VIEW[flat.element_size()])  # [n] the same bytes as integers
    weights = _multipliers(flat.device)
    digest = torch.zeros(2, dtype=torch.int64, device=flat.device)
    for start in range(0, bits.numel(), CHUNK):
        part = bits[start : start + CHUNK].long().remainder(PRIME)  # [c] in [0, P)
        chunk = (part[None, :] * weights[:, : part.numel()]).remainder_(PRIME).sum(dim=1)  # [2] < c * P < 2^53
        digest = (digest * BASE + chunk).remainder_(PRIME)  # [2]
    return digest


def fingerprint(named_tensors: Iterable[tuple[str, Tensor]]) -> str:
    """Hex fingerprint of ``(name, tensor)`` pairs (names, dtypes, shapes and values, in order)."""
    entries, digests = [], []
    for name, tensor in named_tensors:
        entries.append(f"{name}|{tensor.dtype}|{tuple(tensor.shape)}")
        digests.append(tensor_digest(tensor).cpu())
    values = torch.stack(digests).tolist() if digests else []
    text = "\n".join(f"{entry}|{a}|{b}" for entry, (a, b) in zip(entries, values, strict=True))
    return hashlib.sha256(text.encode()).hexdigest()
