"""``policy.vllm``: how the causal-LM policy reaches vLLM, and the server command those options imply.

Two modes (docs/vllm.md):

* ``server`` (default): vLLM runs in its own environment as :mod:`genalign.policies.lm.engines.vllm.server`; the trainer sends
  prompts over HTTP and weights over NCCL (server on GPUs of its own) or CUDA IPC (server on the trainer's GPU,
  ``weight_transfer: ipc``, sleeping between rollouts). The server is launched with the command :func:`server_command`
  prints, and the engine checks at start that the running server matches these options.
* ``colocated``: vLLM runs inside the training process and shares its GPU (sleeping between rollouts); only possible
  in an environment where vLLM and genalign's pins agree (:func:`~genalign.policies.lm.engines.vllm.versions.check_colocated_environment`).
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from typing import Literal

from genalign.policies.lm.engines.vllm.server import VLLM_MAX_LORA_RANKS

#: ``gpu_memory_utilization`` when the option is null: vLLM on GPUs of its own (nccl) or sharing the trainer's (ipc).
DEFAULT_GPU_MEMORY = {"nccl": 0.9, "ipc": 0.4}


@dataclass
class VLLMOptions:
    """Options of ``policy.engine: vllm`` (ignored by the other engines)."""

    mode: Literal["server", "colocated"] = field(
        default="server",
        metadata={
            "help": "server: vLLM in its own environment, driven over HTTP + NCCL (python -m "
            "genalign.policies.lm.engines.vllm.server); colocated: vLLM inside the training process, sharing its GPU."
        },
    )
    server_url: str = field(default="http://127.0.0.1:8000", metadata={"help": "Base URL of the server (server mode)."})
    weight_transfer: Literal["nccl", "ipc"] | None = field(
        default=None,
        metadata={
            "help": "How weights reach vLLM: nccl (a server on GPUs of its own) or ipc (vLLM on the trainer's GPU: "
            "colocated, or a local server started with --weight-transfer ipc); null = nccl for a server, ipc colocated."
        },
    )
    server_wait_s: float = field(
        default=0.0,
        metadata={
            "help": "Seconds to wait for the server to answer at start (e.g. 900 when launched together); 0 = once."
        },
    )
    request_timeout_s: float = field(
        default=3600.0,
        metadata={"help": "Deadline of one server request (connect, send and receive together), in seconds."},
    )
    max_response_mb: float = field(
        default=1024.0, metadata={"help": "A server answer larger than this many MiB fails the request."}
    )
    tensor_parallel_size: int = field(
        default=1, metadata={"help": "GPUs vLLM shards the model over (a server with nccl; 1 on the trainer's GPU)."}
    )
    gpu_memory_utilization: float | None = field(
        default=None,
        metadata={"help": "Fraction of GPU memory vLLM reserves; null = 0.9 on GPUs of its own, 0.4 on the trainer's."},
    )
    enable_prefix_caching: bool = field(
        default=True, metadata={"help": "Reuse the KV cache of shared prompt prefixes (the group's repeated prompt)."}
    )
    dtype: Literal["auto", "bfloat16", "float16", "float32"] = field(
        default="auto", metadata={"help": "Weight dtype inside vLLM; auto = the checkpoint's torch_dtype."}
    )
    lora: Literal["auto", "adapter", "merged"] = field(
        default="auto",
        metadata={
            "help": "With policy.lora: push the adapter as a vLLM LoRA (adapter), push merged weights (merged), or "
            "the adapter when the server serves LoRA and vLLM supports the peft options (auto)."
        },
    )
    sleep: bool | None = field(
        default=None,
        metadata={
            "help": "When vLLM shares the trainer's GPU (weight_transfer: ipc): sleep it between rollouts (weights to "
            "CPU, KV cache freed); null = true."
        },
    )
    seed: int = field(default=0, metadata={"help": "vLLM engine seed (every request also carries its own seed)."})

    def validate(self) -> None:
        checks: list[tuple[bool, str]] = [
            (
                self.server_url.startswith(("http://", "https://")),
                f"policy.vllm.server_url={self.server_url!r} must start with http:// or https://.",
            ),
            (self.server_wait_s >= 0, f"policy.vllm.server_wait_s={self.server_wait_s} must be >= 0."),
            (self.request_timeout_s > 0, f"policy.vllm.request_timeout_s={self.request_timeout_s} must be > 0."),
            (self.max_response_mb > 0, f"policy.vllm.max_response_mb={self.max_response_mb} must be > 0."),
            (
                self.tensor_parallel_size >= 1,
                f"policy.vllm.tensor_parallel_size={self.tensor_parallel_size} must be >= 1.",
            ),
            (
                self.gpu_memory_utilization is None or 0 < self.gpu_memory_utilization <= 1,
                f"policy.vllm.gpu_memory_utilization={self.gpu_memory_utilization} must be in (0, 1] or null.",
            ),
            (
                self.transfer() == "nccl" or self.tensor_parallel_size == 1,
                f"policy.vllm.tensor_parallel_size={self.tensor_parallel_size} needs a server on GPUs of its own "
                "(mode: server, weight_transfer: nccl); vLLM on the trainer's GPU runs with tensor_parallel_size: 1.",
            ),
            (
                self.mode == "server" or self.weight_transfer != "nccl",
                "policy.vllm.weight_transfer=nccl with mode: colocated: vLLM in the training process shares its GPU, "
                "which NCCL cannot do; remove weight_transfer (colocated uses ipc).",
            ),
            (
                self.transfer() == "ipc" or self.sleep is None,
                f"policy.vllm.sleep={self.sleep} only applies when vLLM shares the trainer's GPU (weight_transfer: ipc "
                "or mode: colocated); remove it.",
            ),
        ]
        for ok, message in checks:
            if not ok:
                raise ValueError(message)

    def check_policy(self, *, engine: str, top_k: int, top_p: float) -> None:
        """Validate these options (also when built in Python) and the policy's sampling filters with them.

        The filters: vLLM's ``processed_logprobs`` are taken after top-k / top-p (renormalised over the kept tokens:
        vllm/v1/sample/ops/topk_topp_sampler.py, ``forward_native``), while genalign's behaviour log-probs are
        ``log softmax(logits / T)`` over the whole vocabulary, the quantity re-scoring and TIS / IcePop compare with.
        """
        self.validate()
        if engine == "vllm" and (top_k > 0 or top_p < 1.0):
            raise ValueError(
                f"policy.top_k={top_k} / policy.top_p={top_p} with policy.engine=vllm: vLLM's processed log-probs are "
                "renormalised over the top-k / top-p tokens, genalign's behaviour log-probs are not, so the mismatch "
                "corrections (TIS, IcePop) would compare different quantities. Use top_k: 0 and top_p: 1.0 with vllm, "
                "or engine: static / hf."
            )

    def memory_fraction(self) -> float:
        if self.gpu_memory_utilization is not None:
            return self.gpu_memory_utilization
        return DEFAULT_GPU_MEMORY[self.transfer()]

    def transfer(self) -> Literal["nccl", "ipc"]:
        """The weight-transfer backend: the option, or nccl for a server and ipc colocated."""
        if self.weight_transfer is not None:
            return self.weight_transfer
        return "ipc" if self.mode == "colocated" else "nccl"

    def sleeps(self) -> bool:
        """Whether vLLM sleeps between rollouts (only when it shares the trainer's GPU)."""
        return self.transfer() == "ipc" and self.sleep is not False


def vllm_lora_rank(rank: int) -> int:
    """The smallest ``max_lora_rank`` vLLM accepts that holds a rank-``rank`` adapter."""
    for allowed in VLLM_MAX_LORA_RANKS:
        if allowed >= rank:
            return allowed
    raise ValueError(
        f"policy.lora.rank={rank} exceeds vLLM's largest max_lora_rank {VLLM_MAX_LORA_RANKS[-1]}; "
        "lower the rank or set policy.vllm.lora: merged."
    )


def server_command(options: VLLMOptions, model_path: str, *, lora_rank: int = 0) -> str:
    """The shell command that starts a server matching ``options`` for ``model_path`` (run it in the vLLM env)."""
    host_port = options.server_url.split("://", 1)[1].split("/", 1)[0]
    host, _, port = host_port.rpartition(":") if ":" in host_port else (host_port, "", "8000")
    local = host in ("127.0.0.1", "localhost") or options.transfer() == "ipc"
    argv = [
        "python",
        "-m",
        "genalign.policies.lm.engines.vllm.server",
        "--model",
        model_path,
        "--host",
        "127.0.0.1" if local else "0.0.0.0",
        "--port",
        port or "8000",
        "--tensor-parallel-size",
        str(options.tensor_parallel_size),
        "--gpu-memory-utilization",
        str(options.memory_fraction()),
        "--enable-prefix-caching" if options.enable_prefix_caching else "--no-enable-prefix-caching",
        "--dtype",
        options.dtype,
        "--seed",
        str(options.seed),
    ]
    if options.transfer() == "ipc":
        argv += ["--weight-transfer", "ipc"] + (["--enable-sleep-mode"] if options.sleeps() else [])
    if lora_rank > 0 and options.lora != "merged":
        argv += ["--enable-lora", "--max-lora-rank", str(vllm_lora_rank(lora_rank))]
    return shlex.join(argv)
