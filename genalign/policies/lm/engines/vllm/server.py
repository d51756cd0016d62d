"""The genalign vLLM server: vLLM in its own environment, driven by the trainer over HTTP and NCCL (docs/vllm.md).

This file imports only the Python standard library at module level and vLLM (plus the torch it ships) inside
:class:`VLLMBackend`, so it runs in a virtual environment that holds vLLM's own pins and nothing of genalign::

    python -m genalign.policies.lm.engines.vllm.server --model PATH [options]   # genalign's folder on the path
    python genalign/policies/lm/engines/vllm/server.py --model PATH [options]   # this file alone

The protocol (JSON over HTTP, :data:`PROTOCOL_VERSION`; :data:`ROUTES` maps each route to a backend method whose keyword
arguments are the JSON body's keys):

* ``GET /health``: liveness, answered while a long request runs.
* ``GET /info``: the server's settings and state (``server_id``, ``weight_version``, ``adapter``, vLLM and NCCL
  versions, ``world_size`` of the NCCL weight group, ``dtype``, tensor parallelism, prefix caching, LoRA limits).
* ``POST /generate``: token-id prompts, one shared set of vLLM ``SamplingParams`` fields, one seed per prompt, an
  optional adapter name; returns per prompt the sampled ``token_ids``, their ``logprobs`` (vLLM's
  ``logprobs_mode="processed_logprobs"``: after temperature) and the ``finish_reason``.
* ``POST /weights/init|start|update|finish``: vLLM's native RL weight-transfer calls (``LLM.init_weight_transfer_engine``,
  ``start_weight_update``, ``update_weights``, ``finish_weight_update``), then a prefix-cache reset so no KV block
  computed with the old weights is reused.
* ``POST /adapters/load``: a peft LoRA adapter (``adapter_config.json`` contents and base64 safetensors bytes) written
  to the server's own folder and registered as a ``LoRARequest`` with a fresh integer id; no shared filesystem needed.
* ``POST /sleep`` / ``POST /wake_up``: vLLM's sleep mode (``LLM.sleep(level)`` / ``LLM.wake_up(tags)``), for a server
  that shares the trainer's GPU (``--weight-transfer ipc --enable-sleep-mode``).

Weights reach the workers through vLLM's ``nccl`` backend (the server on GPUs of its own) or its ``ipc`` backend (a
server on the trainer's GPU: CUDA IPC handles, which vLLM unpickles only with ``VLLM_ALLOW_INSECURE_SERIALIZATION=1``;
such a server therefore listens on the loopback interface only).

One request runs at a time (``vllm.LLM`` is a blocking, single-caller engine): a generation and a weight update never
overlap. :class:`VLLMBackend` is also the in-process backend of the colocated mode (:mod:`genalign.policies.lm.engines.vllm.colocated`).
"""

from __future__ import annotations

import argparse
import base64
import importlib.util
import json
import os
import shutil
import sys
import tempfile
import threading
import uuid
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

#: Bumped whenever a route, a body key or a reply key changes; the client refuses a server of another version.
PROTOCOL_VERSION = 1

#: route -> (HTTP verb, backend method or None for /health, whether the call holds the engine lock).
ROUTES: dict[str, tuple[str, str | None, bool]] = {
    "/health": ("GET", None, False),
    "/info": ("GET", "info", False),
    "/generate": ("POST", "generate", True),
    "/weights/init": ("POST", "init_weight_transfer", True),
    "/weights/start": ("POST", "start_weight_update", True),
    "/weights/update": ("POST", "update_weights", True),
    "/weights/finish": ("POST", "finish_weight_update", True),
    "/adapters/load": ("POST", "load_adapter", True),
    "/sleep": ("POST", "sleep", True),
    "/wake_up": ("POST", "wake_up", True),
}

#: vLLM's accepted ``max_lora_rank`` values (vllm/config/lora.py, ``MaxLoRARanks``, vLLM 0.33.0).
VLLM_MAX_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)
#: How many adapters the server keeps registered: the current one and the one before (a request in flight may use it).
ADAPTERS_KEPT = 2


def llm_kwargs(
    model: str,
    *,
    tensor_parallel_size: int = 1,
    gpu_memory_utilization: float = 0.9,
    enable_prefix_caching: bool = True,
    dtype: str = "auto",
    enable_lora: bool = False,
    max_lora_rank: int = 16,
    enable_sleep_mode: bool = False,
    weight_transfer_backend: str = "nccl",
    seed: int = 0,
    max_model_len: int | None = None,
) -> dict[str, Any]:
    """Keyword arguments of ``vllm.LLM`` (vLLM ``EngineArgs`` names, vllm/engine/arg_utils.py) for genalign rollouts.

    Fixed choices: ``logprobs_mode="processed_logprobs"`` (the sampled token's log-prob after temperature, which is
    genalign's behaviour log-prob when top-k / top-p are off: vllm/config/model.py, ``ModelConfig.logprobs_mode``) and a
    weight-transfer config (vllm/config/weight_transfer.py): ``nccl`` for vLLM on GPUs of its own, ``ipc`` for vLLM on
    the trainer's GPU (colocated, or a server started with ``--weight-transfer ipc``).
    """
    if enable_lora and max_lora_rank not in VLLM_MAX_LORA_RANKS:
        raise ValueError(f"max_lora_rank={max_lora_rank} is not one of vLLM's ranks {VLLM_MAX_LORA_RANKS}.")
    kwargs: dict[str, Any] = {
        "model": model,
        "tensor_parallel_size": tensor_parallel_size,
        "gpu_memory_utilization": gpu_memory_utilization,
        "enable_prefix_caching": enable_prefix_caching,
        "dtype": dtype,
        "enable_sleep_mode": enable_sleep_mode,
        "logprobs_mode": "processed_logprobs",
        "weight_transfer_config": {"backend": weight_transfer_backend},
        "seed": seed,
    }
    if enable_lora:
        kwargs |= {"enable_lora": True, "max_lora_rank": max_lora_rank, "max_loras": 1}
    if max_model_len is not None:
        kwargs["max_model_len"] = max_model_len
    return kwargs


class VLLMBackend:
    """The protocol's methods on top of one ``vllm.LLM`` (imported here, so only in the vLLM environment).

    Args:
        kwargs: ``vllm.LLM`` keyword arguments, from :func:`llm_kwargs`.
        adapter_root: folder for received LoRA adapters; a fresh temporary folder when None.
    """

    def __init__(self, kwargs: dict[str, Any], *, adapter_root: str | None = None) -> None:
        import torch
        import vllm

        self._vllm = vllm
        self.settings = dict(kwargs)
        self.llm = vllm.LLM(**kwargs)
        self.server_id = uuid.uuid4().hex
        self.weight_version = "initial"
        self.adapter: str | None = None
        self._adapters: dict[str, Any] = {}  # name -> LoRARequest, oldest first
        self._next_adapter_id = 0
        self._adapter_root = adapter_root or tempfile.mkdtemp(prefix="genalign-vllm-adapters-")
        nccl = torch.cuda.nccl.version() if torch.cuda.is_available() else None
        self._nccl_version = list(nccl[:3]) if nccl else None

    def info(self) -> dict[str, Any]:
        settings = self.settings
        return {
            "protocol": PROTOCOL_VERSION,
            "server_id": self.server_id,
            "vllm_version": self._vllm.__version__,
            "nccl_version": self._nccl_version,
            "model": settings["model"],
            "dtype": str(self.llm.model_config.dtype).removeprefix("torch."),
            "tensor_parallel_size": settings["tensor_parallel_size"],
            "world_size": self.llm.get_world_size(),
            "gpu_memory_utilization": settings["gpu_memory_utilization"],
            "enable_prefix_caching": settings["enable_prefix_caching"],
            "lora_enabled": bool(settings.get("enable_lora", False)),
            "max_lora_rank": settings.get("max_lora_rank", 0),
            "logprobs_mode": settings["logprobs_mode"],
            "weight_transfer_backend": settings["weight_transfer_config"]["backend"],
            "enable_sleep_mode": settings["enable_sleep_mode"],
            "weight_version": self.weight_version,
            "adapter": self.adapter,
        }

    def generate(
        self, prompts: list[list[int]], sampling: dict[str, Any], seeds: list[int], adapter: str | None = None
    ) -> dict[str, Any]:
        """Sample one completion per prompt with ``vllm.SamplingParams(**sampling, seed=seeds[i])``."""
        if len(seeds) != len(prompts):
            raise ValueError(f"got {len(prompts)} prompts but {len(seeds)} seeds; send one seed per prompt.")
        lora_request = None
        if adapter is not None:
            if adapter not in self._adapters:
                raise ValueError(f"adapter {adapter!r} is not loaded (loaded: {list(self._adapters)}).")
            lora_request = self._adapters[adapter]
        params = [self._vllm.SamplingParams(**sampling, seed=int(seed)) for seed in seeds]
        outputs = self.llm.generate(
            [{"prompt_token_ids": list(p)} for p in prompts], params, use_tqdm=False, lora_request=lora_request
        )
        return {
            "outputs": [sample_record(out.outputs[0]) for out in outputs],
            "weight_version": self.weight_version,
            "adapter": adapter,
        }

    def init_weight_transfer(self, init_info: dict[str, Any]) -> dict[str, Any]:
        self.llm.init_weight_transfer_engine({"init_info": init_info})
        return {"status": "initialised"}

    def start_weight_update(self) -> dict[str, Any]:
        self.llm.start_weight_update()
        return {"status": "started"}

    def update_weights(self, update_info: dict[str, Any]) -> dict[str, Any]:
        self.llm.update_weights({"update_info": update_info})
        return {"status": "updated"}

    def finish_weight_update(self, weight_version: str) -> dict[str, Any]:
        self.llm.finish_weight_update(weight_version)
        self.llm.reset_prefix_cache()  # KV blocks cached under the old weights must not be reused
        self.weight_version = weight_version
        return {"status": "finished", "weight_version": weight_version}

    def load_adapter(self, name: str, config: dict[str, Any], weights: str) -> dict[str, Any]:
        """Write a peft adapter (``weights``: base64 of ``adapter_model.safetensors``) and make it the current one."""
        if not self.settings.get("enable_lora", False):
            raise ValueError("this server runs without LoRA; restart it with --enable-lora --max-lora-rank R.")
        if name in self._adapters:
            self.adapter = name
            return {"status": "loaded", "adapter": name}
        directory = os.path.join(self._adapter_root, name)
        os.makedirs(directory, exist_ok=True)
        with open(os.path.join(directory, "adapter_config.json"), "w") as handle:
            json.dump(config, handle)
        with open(os.path.join(directory, "adapter_model.safetensors"), "wb") as handle:
            handle.write(base64.b64decode(weights, validate=True))
        from vllm.lora.request import LoRARequest

        self._next_adapter_id += 1
        request = LoRARequest(lora_name=name, lora_int_id=self._next_adapter_id, lora_path=directory)
        self.llm.llm_engine.add_lora(request)  # load now, so a bad adapter fails here rather than in /generate
        self._adapters[name] = request
        self.adapter = name
        for old in list(self._adapters)[:-ADAPTERS_KEPT]:
            dropped = self._adapters.pop(old)
            self.llm.llm_engine.remove_lora(dropped.lora_int_id)
            shutil.rmtree(dropped.lora_path, ignore_errors=True)
        return {"status": "loaded", "adapter": name}

    # ---- sleep mode: when vLLM shares the trainer's GPU ---------------------------------------------------------------
    def sleep(self, level: int = 1) -> dict[str, Any]:
        """Level 1: weights to CPU memory, KV cache freed (``LLM.sleep``)."""
        self.llm.sleep(level=level)
        return {"status": "sleeping", "level": level}

    def wake_up(self, tags: list[str] | None = None) -> dict[str, Any]:
        """Reallocate ``tags`` (``"weights"``, ``"kv_cache"``; all when None) (``LLM.wake_up``)."""
        self.llm.wake_up(tags=tags)
        return {"status": "awake", "tags": tags}


def sample_record(completion: Any) -> dict[str, Any]:
    """``token_ids``, the sampled tokens' ``logprobs`` and ``finish_reason`` of one vLLM ``CompletionOutput``."""
    token_ids = [int(t) for t in completion.token_ids]
    entries = completion.logprobs or []
    if len(entries) != len(token_ids):
        raise RuntimeError(
            f"vLLM returned {len(entries)} log-prob entries for {len(token_ids)} tokens; requests need logprobs=0."
        )
    logprobs = [float(entry[token].logprob) for token, entry in zip(token_ids, entries, strict=True)]
    return {"token_ids": token_ids, "logprobs": logprobs, "finish_reason": completion.finish_reason}


def make_server(backend: Any, host: str = "127.0.0.1", port: int = 8000) -> ThreadingHTTPServer:
    """An HTTP server dispatching :data:`ROUTES` to ``backend`` (any object with the protocol's methods)."""
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self._dispatch("GET")

        def do_POST(self) -> None:
            self._dispatch("POST")

        def log_message(self, format: str, *args: Any) -> None:  # requests are logged by the trainer, not here
            pass

        def _reply(self, status: HTTPStatus, payload: dict[str, Any]) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _dispatch(self, verb: str) -> None:
            path = self.path.split("?", 1)[0]
            if path not in ROUTES:
                self._reply(HTTPStatus.NOT_FOUND, {"error": f"unknown route {path}; routes: {sorted(ROUTES)}"})
                return
            expected, method, locked = ROUTES[path]
            if verb != expected:
                self._reply(HTTPStatus.METHOD_NOT_ALLOWED, {"error": f"{path} takes {expected}, not {verb}"})
                return
            if method is None:
                self._reply(HTTPStatus.OK, {"status": "ok"})
                return
            try:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
            except json.JSONDecodeError as err:
                self._reply(HTTPStatus.BAD_REQUEST, {"error": f"{path}: body is not JSON ({err})"})
                return
            if not isinstance(body, dict):
                self._reply(HTTPStatus.BAD_REQUEST, {"error": f"{path}: body must be a JSON object"})
                return
            try:
                if locked:
                    with lock:
                        result = getattr(backend, method)(**body)
                else:
                    result = getattr(backend, method)(**body)
            except (TypeError, ValueError) as err:
                self._reply(HTTPStatus.BAD_REQUEST, {"error": f"{path}: {type(err).__name__}: {err}"})
                return
            except Exception as err:  # reported to the trainer, which raises with this message
                self._reply(HTTPStatus.INTERNAL_SERVER_ERROR, {"error": f"{path}: {type(err).__name__}: {err}"})
                return
            self._reply(HTTPStatus.OK, result)

    return ThreadingHTTPServer((host, port), Handler)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description="genalign vLLM rollout server (run it in the vLLM environment).")
    parser.add_argument("--model", required=True, help="Model folder or Hub id (the policy's base model).")
    parser.add_argument("--host", default="127.0.0.1", help="Address to listen on (0.0.0.0 for other machines).")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--tensor-parallel-size", type=int, default=1)
    parser.add_argument("--gpu-memory-utilization", type=float, default=0.9)
    parser.add_argument("--enable-prefix-caching", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--dtype", default="auto", choices=["auto", "bfloat16", "float16", "float32"])
    parser.add_argument(
        "--weight-transfer",
        default="nccl",
        choices=["nccl", "ipc"],
        help="nccl: the server has GPUs of its own; ipc: it shares the trainer's GPU (loopback only).",
    )
    parser.add_argument("--enable-sleep-mode", action="store_true", help="Let the trainer sleep / wake vLLM (ipc).")
    parser.add_argument("--enable-lora", action="store_true", help="Serve LoRA adapters pushed by the trainer.")
    parser.add_argument("--max-lora-rank", type=int, default=16, choices=VLLM_MAX_LORA_RANKS)
    parser.add_argument("--max-model-len", type=int, default=None)
    parser.add_argument("--seed", type=int, default=0)
    return parser


def kwargs_from_args(args: argparse.Namespace) -> dict[str, Any]:
    """:func:`llm_kwargs` of parsed command-line arguments."""
    return llm_kwargs(
        args.model,
        tensor_parallel_size=args.tensor_parallel_size,
        gpu_memory_utilization=args.gpu_memory_utilization,
        enable_prefix_caching=args.enable_prefix_caching,
        dtype=args.dtype,
        enable_lora=args.enable_lora,
        max_lora_rank=args.max_lora_rank,
        enable_sleep_mode=args.enable_sleep_mode,
        weight_transfer_backend=args.weight_transfer,
        seed=args.seed,
        max_model_len=args.max_model_len,
    )


def main(argv: list[str] | None = None) -> None:
    # Run as a file, this folder is sys.path[0]: its module names (client, engine, options, ...) must not shadow any
    # top-level module vLLM or its dependencies import.
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    args = build_parser().parse_args(argv)
    if importlib.util.find_spec("vllm") is None:
        raise SystemExit(
            f"{sys.executable} cannot import vllm: run this server with the vLLM environment's python "
            "(python -m venv vllm-env && vllm-env/bin/pip install vllm==0.33.0; docs/vllm.md)."
        )
    if args.weight_transfer == "ipc":
        if args.host not in ("127.0.0.1", "localhost"):
            raise SystemExit("--weight-transfer ipc unpickles what the trainer sends: listen on 127.0.0.1 only.")
        os.environ["VLLM_ALLOW_INSECURE_SERIALIZATION"] = "1"  # for the worker processes vLLM starts
    backend = VLLMBackend(kwargs_from_args(args))
    server = make_server(backend, args.host, args.port)
    print(
        f"genalign vLLM server ready on http://{args.host}:{args.port} (protocol {PROTOCOL_VERSION}, "
        f"vLLM {backend.info()['vllm_version']}, model {args.model})",
        flush=True,
    )
    server.serve_forever()


if __name__ == "__main__":
    main()
