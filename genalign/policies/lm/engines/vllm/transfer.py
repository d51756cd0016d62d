"""The trainer's half of vLLM's native weight transfer, written with torch alone (vLLM is not importable here).

One update is vLLM's three-call session ``start_weight_update`` -> ``update_weights(metadata)`` -> ``finish_weight_update
(version)`` (vllm/v1/worker/gpu_worker.py); the data travels on one of vLLM's backends:

* :class:`NCCLWeightSender` (server mode): vLLM's ``nccl`` backend (vllm/distributed/weight_transfer/nccl_engine.py).
  The rendezvous is the unique-id mode vLLM documents for trainers that do not run vLLM (``NCCLWeightTransferInitInfo``
  in nccl_common.py): the trainer mints an ``ncclUniqueId`` (``torch.cuda.nccl.unique_id()``), sends it base64-encoded
  with ``rank_offset=1`` and ``world_size = 1 + server workers``, joins as rank 0 while the server joins, and answers
  vLLM's warm-up (a one-element float32 ``all_reduce``, ``PyNcclCommunicator._init_comm``). Each update then
  broadcasts the tensors one by one from rank 0 (``packed=False``: the worker receives each into a fresh tensor and
  calls ``load_weights``) while the server's ``update_weights`` request waits for them in another thread.
* :class:`IPCWeightSender` (colocated): vLLM's ``ipc`` backend (ipc_engine.py): CUDA IPC handles of the tensors,
  ``{gpu uuid: torch.multiprocessing.reductions.reduce_tensor(t)[1]}`` per tensor, pickled into
  ``ipc_handles_pickled`` (the worker unpickles it when ``VLLM_ALLOW_INSECURE_SERIALIZATION=1``, set by the colocated
  mode in its own process). The tensors stay referenced until ``finish_weight_update`` returns.

:class:`WeightStream` declares the weights up front (names, dtypes, shapes: the metadata vLLM sizes its receive
buffers from) and produces them one at a time, so a merged LoRA copy exists for one layer at a time (NCCL).
"""

from __future__ import annotations

import base64
import pickle
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any, Protocol

import torch
from torch import Tensor

#: NCCL counts are 32-bit in ``torch.cuda.nccl.broadcast``; a larger tensor would need chunks vLLM does not expect.
MAX_BROADCAST_NUMEL = 2**31 - 1


class TransferAPI(Protocol):
    """The server-protocol calls a sender makes (an HTTP client or an in-process backend)."""

    def init_weight_transfer(self, init_info: dict[str, Any]) -> Any: ...
    def start_weight_update(self) -> Any: ...
    def update_weights(self, update_info: dict[str, Any]) -> Any: ...
    def finish_weight_update(self, weight_version: str) -> Any: ...


@dataclass(frozen=True)
class WeightSpec:
    name: str
    dtype: torch.dtype
    shape: tuple[int, ...]


class WeightStream:
    """Weights to send: ``specs`` declared up front, ``produce()`` yielding ``(name, tensor)`` in the same order.

    :meth:`tensors` casts each tensor to its spec's dtype on ``device`` and checks it against the spec, so the stream
    the server was told to expect and the one sent cannot diverge silently (a divergence would hang NCCL).
    """

    def __init__(self, specs: list[WeightSpec], produce: Callable[[], Iterator[tuple[str, Tensor]]]) -> None:
        self.specs = specs
        self.produce = produce

    def metadata(self) -> dict[str, list]:
        """vLLM's update info fields: ``names``, ``dtype_names`` (``getattr(torch, name)`` on the worker), ``shapes``."""
        return {
            "names": [s.name for s in self.specs],
            "dtype_names": [str(s.dtype).removeprefix("torch.") for s in self.specs],
            "shapes": [list(s.shape) for s in self.specs],
        }

    def tensors(self, device: torch.device) -> Iterator[tuple[str, Tensor]]:
        count = 0
        for name, tensor in self.produce():
            if count >= len(self.specs):
                raise RuntimeError(f"weight stream produced more tensors than its {len(self.specs)} specs ({name!r}).")
            spec = self.specs[count]
            if name != spec.name or tuple(tensor.shape) != spec.shape:
                raise RuntimeError(
                    f"weight stream item {count} is {name!r} {tuple(tensor.shape)}, declared {spec.name!r} {spec.shape}."
                )
            count += 1
            yield name, tensor.to(device=device, dtype=spec.dtype).contiguous()
        if count != len(self.specs):
            raise RuntimeError(f"weight stream produced {count} tensors, declared {len(self.specs)}.")


def _on_device(device: torch.device):
    return torch.cuda.device(device) if device.type == "cuda" else nullcontext()


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def nccl_init_info(unique_id: bytes, world_size: int) -> dict[str, Any]:
    """vLLM's ``NCCLWeightTransferInitInfo`` fields for the unique-id rendezvous (the trainer is rank 0)."""
    return {
        "nccl_unique_id_b64": base64.b64encode(unique_id).decode(),  # standard base64, as vLLM decodes it
        "rank_offset": 1,
        "world_size": world_size,
        "packed": False,
    }


class NCCLWeightSender:
    """Rank 0 of an NCCL group with the server's workers (see the module docstring).

    Args:
        device: the trainer's CUDA device.
        nccl: the NCCL functions (``unique_id``, ``init_rank``, ``all_reduce``, ``broadcast``); ``torch.cuda.nccl``.
    """

    def __init__(self, device: torch.device, *, nccl: Any = None) -> None:
        self.device = device
        self.nccl = nccl if nccl is not None else torch.cuda.nccl
        self.comm: Any = None

    def connect(self, api: TransferAPI, info: dict[str, Any]) -> None:
        world_size = 1 + int(info["world_size"])
        unique_id = self.nccl.unique_id()
        with ThreadPoolExecutor(max_workers=1) as pool:  # both sides must enter ncclCommInitRank together
            joined = pool.submit(api.init_weight_transfer, nccl_init_info(unique_id, world_size))
            with _on_device(self.device):
                comm = self.nccl.init_rank(world_size, unique_id, 0)
                warm_up = torch.zeros(1, dtype=torch.float32, device=self.device)
                self.nccl.all_reduce([warm_up], comms=[comm])  # matches vLLM's warm-up collective
                _synchronize(self.device)
            joined.result()
        self.comm = comm

    def send(self, api: TransferAPI, stream: WeightStream, version: str) -> None:
        if self.comm is None:
            raise RuntimeError("NCCLWeightSender.send before connect(): the NCCL group does not exist yet.")
        too_large = [s.name for s in stream.specs if torch.Size(s.shape).numel() > MAX_BROADCAST_NUMEL]
        if too_large:
            raise ValueError(f"{too_large[0]} has more than {MAX_BROADCAST_NUMEL} elements, over NCCL's count limit.")
        api.start_weight_update()
        pool = ThreadPoolExecutor(max_workers=1)
        try:
            received = pool.submit(api.update_weights, stream.metadata())
            with _on_device(self.device):
                for _name, tensor in stream.tensors(self.device):
                    if received.done():  # the server refused before receiving: raise instead of hanging in NCCL
                        received.result()
                    self.nccl.broadcast([tensor], root=0, comms=[self.comm])
                _synchronize(self.device)
            received.result()
        finally:
            pool.shutdown(wait=False)  # never join a thread that may wait in NCCL for a broadcast that failed
        api.finish_weight_update(version)


def cuda_ipc_handle(tensor: Tensor) -> dict[str, tuple]:
    """``{gpu uuid: rebuild args}`` of ``tensor`` as vLLM's IPC worker reads it (``ipc_engine.receive_weights``)."""
    from torch.multiprocessing.reductions import reduce_tensor

    uuid = str(torch.cuda.get_device_properties(tensor.device).uuid)
    return {uuid: reduce_tensor(tensor)[1]}


class IPCWeightSender:
    """CUDA IPC to an in-process (colocated) vLLM on the same GPU (see the module docstring).

    Args:
        device: the trainer's CUDA device (vLLM's worker runs on the same one).
        export: ``tensor -> {gpu uuid: handle args}``; :func:`cuda_ipc_handle`.
    """

    def __init__(self, device: torch.device, *, export: Callable[[Tensor], dict] = cuda_ipc_handle) -> None:
        self.device = device
        self.export = export

    def connect(self, api: TransferAPI, info: dict[str, Any]) -> None:
        api.init_weight_transfer({"packed": False})

    def send(self, api: TransferAPI, stream: WeightStream, version: str) -> None:
        api.start_weight_update()
        keep: list[Tensor] = []  # the IPC handles do not keep their storage alive
        handles = []
        for _name, tensor in stream.tensors(self.device):
            keep.append(tensor)
            handles.append(self.export(tensor))
        update = stream.metadata() | {"ipc_handles_pickled": base64.b64encode(pickle.dumps(handles)).decode()}
        api.update_weights(update)
        api.finish_weight_update(version)
        del keep
        if self.device.type == "cuda":
            torch.cuda.ipc_collect()
