"""The HTTP client against the real server code (genalign.policies.lm.engines.vllm.server.make_server) with a recording backend:
every route, error replies, /health during a long call, waiting for a server, and the missing-server error."""

from __future__ import annotations

import json
import socket
import threading
import time
import urllib.error
import urllib.request

import pytest
import torch

from genalign.policies.lm.engines.vllm.client import HTTPServerClient, VLLMServerError
from genalign.policies.lm.engines.vllm.options import VLLMOptions
from genalign.policies.lm.engines.vllm.server import PROTOCOL_VERSION, ROUTES, make_server
from tests.policies.lm.engines.vllm_fakes import serving


class RecordingBackend:
    """Every protocol method, recording its keyword arguments."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict]] = []
        self.release = threading.Event()
        self.release.set()

    def info(self):
        self.calls.append(("info", {}))
        return {"protocol": PROTOCOL_VERSION, "server_id": "s1"}

    def generate(self, prompts, sampling, seeds, adapter=None):
        self.calls.append(("generate", {"prompts": prompts, "sampling": sampling, "seeds": seeds, "adapter": adapter}))
        self.release.wait(10)
        if sampling.get("temperature", 1.0) <= 0:
            raise ValueError("temperature must be > 0")
        if sampling.get("explode"):
            raise RuntimeError("CUDA out of memory")
        return {"outputs": [{"token_ids": [1], "logprobs": [-0.5], "finish_reason": "stop"}] * len(prompts)}

    def init_weight_transfer(self, init_info):
        self.calls.append(("init", init_info))
        return {"status": "initialised"}

    def start_weight_update(self):
        self.calls.append(("start", {}))
        return {"status": "started"}

    def update_weights(self, update_info):
        self.calls.append(("update", update_info))
        return {"status": "updated"}

    def finish_weight_update(self, weight_version):
        self.calls.append(("finish", {"weight_version": weight_version}))
        return {"status": "finished"}

    def load_adapter(self, name, config, weights):
        self.calls.append(("adapter", {"name": name, "config": config, "weights": weights}))
        return {"status": "loaded", "adapter": name}


def test_every_route_reaches_its_backend_method_with_the_body_as_arguments():
    backend = RecordingBackend()
    with serving(backend) as url:
        client = HTTPServerClient(url, timeout_s=30)
        assert client.info()["protocol"] == PROTOCOL_VERSION
        reply = client.generate([[1, 2], [3]], {"temperature": 0.7}, [11, 12], adapter="genalign-lora-x")
        assert len(reply["outputs"]) == 2
        client.init_weight_transfer({"nccl_unique_id_b64": "AAA=", "rank_offset": 1, "world_size": 2})
        client.start_weight_update()
        client.update_weights({"names": ["a"], "dtype_names": ["bfloat16"], "shapes": [[2]]})
        client.finish_weight_update("genalign-0123")
        client.load_adapter("genalign-lora-y", {"r": 8}, "c2FmZXRlbnNvcnM=")
    assert backend.calls == [
        ("info", {}),
        ("generate", {"prompts": [[1, 2], [3]], "sampling": {"temperature": 0.7}, "seeds": [11, 12], "adapter": "genalign-lora-x"}),
        ("init", {"nccl_unique_id_b64": "AAA=", "rank_offset": 1, "world_size": 2}),
        ("start", {}),
        ("update", {"names": ["a"], "dtype_names": ["bfloat16"], "shapes": [[2]]}),
        ("finish", {"weight_version": "genalign-0123"}),
        ("adapter", {"name": "genalign-lora-y", "config": {"r": 8}, "weights": "c2FmZXRlbnNvcnM="}),
    ]  # fmt: skip


def test_backend_errors_come_back_as_client_errors_naming_route_status_and_reason():
    with serving(RecordingBackend()) as url:
        client = HTTPServerClient(url, timeout_s=30)
        with pytest.raises(
            VLLMServerError, match=r"/generate failed with HTTP 400: /generate: ValueError: temperature"
        ):
            client.generate([[1]], {"temperature": 0.0}, [1])
        with pytest.raises(VLLMServerError, match=r"HTTP 500: /generate: RuntimeError: CUDA out of memory"):
            client.generate([[1]], {"explode": True}, [1])
        with pytest.raises(VLLMServerError, match=r"HTTP 400: .*unexpected keyword argument 'bogus'"):
            client._call("/weights/start", {"bogus": 1})


def raw(url: str, route: str, method: str, data: bytes | None = None) -> tuple[int, dict]:
    request = urllib.request.Request(url + route, data=data, method=method)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def test_unknown_routes_wrong_verbs_and_bad_bodies_are_answered_in_json():
    with serving(RecordingBackend()) as url:
        status, body = raw(url, "/v1/completions", "POST", b"{}")
        assert status == 404 and "/generate" in body["error"]
        status, body = raw(url, "/generate", "GET")
        assert status == 405 and "takes POST" in body["error"]
        status, body = raw(url, "/generate", "POST", b"not json")
        assert status == 400 and "not JSON" in body["error"]
        status, body = raw(url, "/generate", "POST", b"[1, 2]")
        assert status == 400 and "JSON object" in body["error"]
        assert raw(url, "/health", "GET") == (200, {"status": "ok"})
    assert set(ROUTES) >= {"/health", "/info", "/generate", "/weights/update", "/adapters/load"}


def test_health_and_info_answer_while_a_generation_holds_the_engine():
    backend = RecordingBackend()
    backend.release.clear()
    with serving(backend) as url:
        client = HTTPServerClient(url, timeout_s=30)
        worker = threading.Thread(target=client.generate, args=([[1]], {}, [1]))
        worker.start()
        time.sleep(0.2)
        assert raw(url, "/health", "GET")[0] == 200 and client.info()["server_id"] == "s1"
        backend.release.set()
        worker.join(10)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_waiting_for_a_server_that_starts_later_and_giving_up_on_one_that_does_not():
    port = free_port()
    client = HTTPServerClient(f"http://127.0.0.1:{port}")
    with pytest.raises(VLLMServerError, match=f"127.0.0.1:{port}/health failed"):
        client.wait_until_healthy(0)
    server = make_server(RecordingBackend(), "127.0.0.1", port)

    def start_late():
        time.sleep(0.5)
        server.serve_forever()

    threading.Thread(target=start_late, daemon=True).start()
    try:
        client.wait_until_healthy(20, poll_s=0.1)
    finally:
        server.shutdown()
        server.server_close()


def test_engine_without_a_server_explains_how_to_start_one():
    from genalign.policies.lm.engines.vllm.engine import VLLMEngine

    model = torch.nn.Linear(2, 2)
    options = VLLMOptions(server_url=f"http://127.0.0.1:{free_port()}", tensor_parallel_size=2)
    with pytest.raises(RuntimeError, match="found no genalign vLLM server") as caught:
        VLLMEngine(model, None, model_path="/models/base", options=options)
    message = str(caught.value)
    assert "python -m genalign.policies.lm.engines.vllm.server --model /models/base" in message
    assert "--tensor-parallel-size 2" in message and "engine='static'" in message


def test_server_started_outside_the_vllm_environment_says_which_python_to_use():
    import importlib.util

    from genalign.policies.lm.engines.vllm.server import main

    if importlib.util.find_spec("vllm") is not None:
        pytest.skip("vllm is importable here")
    with pytest.raises(SystemExit, match="cannot import vllm: run this server with the vLLM environment's python"):
        main(["--model", "/models/base"])


def test_requests_end_within_their_deadline_and_only_get_routes_are_retried(monkeypatch):
    """A server that trickles, sends 300 MiB or fails: the client's request ends within timeout_s, an answer stops at
    max_response_mb, and only the GET routes (which change nothing on the server) are retried."""
    from http.server import BaseHTTPRequestHandler

    from genalign.policies.lm.engines.vllm import client as client_module
    from tests.misbehaving_http import misbehave, serve

    monkeypatch.setattr(client_module, "GET_BACKOFF_S", 0.01)
    stop = threading.Event()
    behaviour = {"POST": "trickle_body", "GET": "http500"}
    seen: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_GET(self):
            seen.append(f"GET {self.path}")
            misbehave(self, behaviour["GET"], stop=stop, elsewhere="http://127.0.0.1:1")

        def do_POST(self):
            seen.append(f"POST {self.path}")
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            misbehave(self, behaviour["POST"], stop=stop, elsewhere="http://127.0.0.1:1")

    server, url = serve(Handler)
    try:
        client = HTTPServerClient(url, timeout_s=0.5, max_response_mb=4)
        start = time.perf_counter()
        with pytest.raises(VLLMServerError, match=r"POST .*/generate failed \(timeout\): no complete answer"):
            client.generate([[1]], {}, [1])
        assert time.perf_counter() - start < 0.5 + 0.4 and seen == ["POST /generate"]  # a POST is not retried
        behaviour["POST"] = "huge"
        with pytest.raises(VLLMServerError, match=r"failed \(too_large\): the answer passed the limit of 4194304"):
            client.start_weight_update()
        seen.clear()
        with pytest.raises(VLLMServerError, match="/info failed with HTTP 500: overloaded"):
            client.info()
        assert seen == ["GET /info"] * 3  # retried twice
    finally:
        stop.set()
        server.shutdown()
        server.server_close()
