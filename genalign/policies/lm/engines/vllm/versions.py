"""Version and settings checks between genalign, the vLLM server and (colocated) the vLLM package.

Every check raises with the versions or values on both sides and the fix. The facts:

* :data:`MIN_VLLM_VERSION` is the vLLM release whose source this integration was written against (the native RL
  weight-transfer API: ``LLM.init_weight_transfer_engine`` / ``start_weight_update`` / ``update_weights`` /
  ``finish_weight_update`` in vllm/entrypoints/rl/offline.py, the NCCL unique-id rendezvous in
  vllm/distributed/weight_transfer/nccl_common.py).
* vLLM wheels pin one torch release and a transformers range (its ``Requires-Dist``, e.g. 0.33.0: ``torch==2.14.0``,
  ``transformers<5.21.0,>=5.16.1``) and its compiled kernels only load against that torch. In-process (colocated) use
  therefore needs the environment's torch and transformers to satisfy vLLM's own requirements.
* NCCL peers must run compatible NCCL builds; the server reports the version its torch bundles.
"""

from __future__ import annotations

import importlib.metadata
from collections.abc import Callable
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement
from packaging.version import Version

from genalign.policies.lm.engines.vllm.options import VLLMOptions, server_command, vllm_lora_rank
from genalign.policies.lm.engines.vllm.server import PROTOCOL_VERSION

MIN_VLLM_VERSION = "0.33.0"
FIX_SEPARATE_SERVER = "run vLLM as a separate server instead (policy.vllm.mode: server; docs/vllm.md)"


def check_server_info(info: dict[str, Any], *, local_nccl: tuple[int, ...] | None) -> None:
    """Protocol version, vLLM version and NCCL version of a server's ``/info`` reply."""
    if info.get("protocol") != PROTOCOL_VERSION:
        raise RuntimeError(
            f"the vLLM server speaks genalign protocol {info.get('protocol')!r}, this genalign speaks "
            f"{PROTOCOL_VERSION}; start the server from the same genalign checkout as the trainer."
        )
    version = str(info.get("vllm_version", "0"))
    if Version(version) < Version(MIN_VLLM_VERSION):
        raise RuntimeError(
            f"the vLLM server runs vLLM {version}; genalign needs vLLM >= {MIN_VLLM_VERSION} (native weight-transfer "
            f"API). In the server's environment: pip install 'vllm>={MIN_VLLM_VERSION}'."
        )
    remote = info.get("nccl_version")
    uses_nccl = info.get("weight_transfer_backend") == "nccl" and local_nccl and remote
    if uses_nccl and tuple(remote[:2]) != tuple(local_nccl[:2]):
        raise RuntimeError(
            f"NCCL {'.'.join(map(str, remote))} on the vLLM server vs {'.'.join(map(str, local_nccl))} in the "
            "trainer: the weight broadcast needs the same NCCL major.minor on both sides. Install the trainer's "
            "nvidia-nccl-cu* version in the server environment (or the server's in the trainer's)."
        )


def check_server_settings(info: dict[str, Any], options: VLLMOptions, *, model_path: str, lora_rank: int) -> None:
    """The running server must match ``policy.vllm`` (tensor parallelism, memory, prefix caching, LoRA limits)."""
    expected = {
        "weight_transfer_backend": options.transfer(),
        "tensor_parallel_size": options.tensor_parallel_size,
        "gpu_memory_utilization": options.memory_fraction(),
        "enable_prefix_caching": options.enable_prefix_caching,
    }
    if options.sleeps():
        expected["enable_sleep_mode"] = True
    if lora_rank > 0 and options.lora == "adapter":
        expected["lora_enabled"] = True
    for key, value in expected.items():
        if info.get(key) != value:
            raise ValueError(
                f"policy.vllm asks for {key}={value!r} but the server at {options.server_url} runs with "
                f"{info.get(key)!r}; restart it with: {server_command(options, model_path, lora_rank=lora_rank)}"
            )
    if options.lora == "adapter" and lora_rank > int(info.get("max_lora_rank", 0)):
        raise ValueError(
            f"policy.lora.rank={lora_rank} exceeds the server's max_lora_rank={info.get('max_lora_rank')}; "
            f"restart it with --max-lora-rank {vllm_lora_rank(lora_rank)}, or set policy.vllm.lora: merged."
        )


def check_colocated_environment(
    *,
    version: Callable[[str], str] = importlib.metadata.version,
    requires: Callable[[str], list[str] | None] = importlib.metadata.requires,
    cuda_available: Callable[[], bool] | None = None,
) -> None:
    """vLLM installed, new enough, its torch / transformers requirements met by this environment, and a CUDA GPU.

    ``version`` / ``requires`` / ``cuda_available`` default to the installed packages (arguments for tests).
    """
    try:
        installed = version("vllm")
    except importlib.metadata.PackageNotFoundError:
        raise ImportError(
            "policy.vllm.mode=colocated needs vllm in the training environment, which genalign's pins usually rule "
            f"out; {FIX_SEPARATE_SERVER}. Without a GPU use engine='static' or engine='hf'."
        ) from None
    if Version(installed) < Version(MIN_VLLM_VERSION):
        raise ImportError(f"vllm {installed} is installed; genalign needs vllm >= {MIN_VLLM_VERSION}.")
    for line in requires("vllm") or []:
        try:
            requirement = Requirement(line)
        except InvalidRequirement:
            continue
        if requirement.name not in ("torch", "transformers") or requirement.marker is not None:
            continue
        try:
            have = version(requirement.name)
        except importlib.metadata.PackageNotFoundError:
            have = "none"
        if have == "none" or not requirement.specifier.contains(Version(have).base_version, prereleases=True):
            raise ImportError(
                f"vllm {installed} requires {requirement} but this environment has {requirement.name} {have}: "
                f"vLLM's kernels cannot load here. Either install vllm's pins (pip install 'vllm=={installed}' "
                f"'{requirement}') in an environment where genalign also works, or {FIX_SEPARATE_SERVER}."
            )
    if cuda_available is None:
        import torch

        cuda_available = torch.cuda.is_available
    if not cuda_available():
        raise RuntimeError("engine='vllm' needs a CUDA GPU; on CPU use engine='static' or engine='hf'.")
