"""Change detection and weight pushes: content fingerprints, WeightSync against the fake vLLM backend (no push when
nothing changed, a push after a change or a server restart, adapters by name), and the NCCL / IPC senders' protocol
with the transport replaced by recorders (the transports themselves need GPUs: test_vllm_gpu.py)."""

from __future__ import annotations

import base64
import pickle

import pytest
import torch

from genalign.policies.lm.engines.vllm import fingerprint as fp
from genalign.policies.lm.engines.vllm.sync import WeightSync, weight_stream
from genalign.policies.lm.engines.vllm.transfer import IPCWeightSender, NCCLWeightSender, WeightSpec, WeightStream
from genalign.policies.lm.tiny import build_tiny_causal_lm
from tests.policies.lm.engines.vllm_fakes import FakeVLLMBackend, LoopbackSender

torch.set_num_threads(1)


# ---- fingerprints ---------------------------------------------------------------------------------------------------
def reference_digest(tensor: torch.Tensor, chunk: int) -> list[int]:
    """The module docstring's formula, element by element in Python integers."""
    bits = tensor.reshape(-1).view({2: torch.int16, 4: torch.int32}[tensor.element_size()]).tolist()
    weights = fp._multipliers(torch.device("cpu")).tolist()
    digest = [0, 0]
    for start in range(0, len(bits), chunk):
        for k in range(2):
            part = sum(w * (x % fp.PRIME) % fp.PRIME for w, x in zip(weights[k], bits[start : start + chunk]))
            digest[k] = (digest[k] * fp.BASE + part) % fp.PRIME
    return digest


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_digest_matches_the_formula_across_chunks(monkeypatch, dtype):
    monkeypatch.setattr(fp, "CHUNK", 7)
    tensor = torch.randn(5, 6, generator=torch.Generator().manual_seed(0)).to(dtype)
    assert fp.tensor_digest(tensor).tolist() == reference_digest(tensor, 7)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_fingerprint_sees_a_one_ulp_change_and_a_swap_but_not_a_copy(monkeypatch, dtype):
    monkeypatch.setattr(fp, "CHUNK", 4)
    weights = torch.randn(3, 5, generator=torch.Generator().manual_seed(1)).to(dtype)
    base = fp.fingerprint([("w", weights)])
    assert fp.fingerprint([("w", weights.clone())]) == base
    nudged = weights.clone()
    nudged[2, 4] = torch.nextafter(nudged[2, 4].float(), torch.tensor(9.0)).to(dtype)
    if nudged[2, 4] == weights[2, 4]:  # bf16 needs a larger step to move
        nudged[2, 4] = nudged[2, 4] * 1.01
    assert fp.fingerprint([("w", nudged)]) != base
    swapped = weights.clone().reshape(-1)
    swapped[[0, 9]] = swapped[[9, 0]]
    assert fp.fingerprint([("w", swapped.reshape(3, 5))]) != base
    assert fp.fingerprint([("v", weights)]) != base
    assert fp.fingerprint([("w", weights.reshape(5, 3))]) != base


# ---- WeightSync against the fake backend ----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return str(build_tiny_causal_lm(tmp_path_factory.mktemp("sync"), architecture="llama", vocab_size=96))


def load(model_dir):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(model_dir).eval()


def same_weights(backend: FakeVLLMBackend, named) -> bool:
    params = dict(backend.base.named_parameters())
    return all(torch.equal(params[name], tensor) for name, tensor in named)


def test_merged_mode_pushes_only_after_a_change_or_a_server_restart(model_dir):
    model = load(model_dir)
    backend = FakeVLLMBackend(model_dir)
    sender = LoopbackSender(backend)
    sync = WeightSync(model, backend, sender, use_adapter=False)
    assert sync.ensure_current() is None
    assert (sender.connects, sync.weight_pushes) == (1, 1)  # the first rollout always pushes (e.g. resumed weights)
    sync.ensure_current()
    assert sync.weight_pushes == 1 and backend.calls.count("start") == 1
    with torch.no_grad():
        model.model.layers[1].mlp.down_proj.weight[0, 0] += 0.5
    sync.ensure_current()
    assert sync.weight_pushes == 2 and same_weights(backend, model.named_parameters())
    backend.restart()  # new server id, checkpoint weights again
    sync.ensure_current()
    assert (sender.connects, sync.weight_pushes) == (2, 3) and same_weights(backend, model.named_parameters())
    assert backend.weight_version == sync.weights_version() == sender.versions[-1]


def test_adapter_mode_sends_the_base_once_and_each_adapter_version_once(model_dir):
    from peft import LoraConfig, get_peft_model

    model = get_peft_model(load(model_dir), LoraConfig(r=4, target_modules=["q_proj", "v_proj"])).eval()
    backend = FakeVLLMBackend(model_dir, lora_enabled=True)
    sync = WeightSync(model, backend, LoopbackSender(backend), use_adapter=True)
    first = sync.ensure_current()
    assert first.startswith("genalign-lora-") and backend.adapter == first
    assert (sync.weight_pushes, sync.adapter_loads) == (1, 1)
    assert sync.ensure_current() == first and (sync.weight_pushes, sync.adapter_loads) == (1, 1)
    with torch.no_grad():
        model.base_model.model.model.layers[0].self_attn.q_proj.lora_B["default"].weight.fill_(0.1)
    second = sync.ensure_current()
    assert second != first and backend.adapter == second
    assert (sync.weight_pushes, sync.adapter_loads) == (1, 2)
    ids = torch.tensor([[5, 6, 7, 8]])
    with torch.no_grad():
        torch.testing.assert_close(backend.adapters[second](input_ids=ids).logits, model(input_ids=ids).logits)


def test_merged_mode_with_lora_sends_the_merged_weights(model_dir):
    from peft import LoraConfig, get_peft_model

    model = get_peft_model(load(model_dir), LoraConfig(r=4, target_modules="all-linear", use_dora=True)).eval()
    with torch.no_grad():
        for param in model.parameters():
            if param.requires_grad:
                param.add_(0.05)
    backend = FakeVLLMBackend(model_dir)
    WeightSync(model, backend, LoopbackSender(backend), use_adapter=False).ensure_current()
    ids = torch.tensor([[5, 6, 7, 8]])
    with torch.no_grad():
        torch.testing.assert_close(backend.base(input_ids=ids).logits, model(input_ids=ids).logits, atol=1e-5, rtol=0)


# ---- senders with recorded transports -------------------------------------------------------------------------------
class RecordingAPI:
    def __init__(self, refuse_update: bool = False) -> None:
        self.calls: list[tuple[str, object]] = []
        self.refuse_update = refuse_update

    def init_weight_transfer(self, init_info):
        self.calls.append(("init", init_info))

    def start_weight_update(self):
        self.calls.append(("start", None))

    def update_weights(self, update_info):
        self.calls.append(("update", update_info))
        if self.refuse_update:
            raise RuntimeError("Invalid update_info: shapes")

    def finish_weight_update(self, weight_version):
        self.calls.append(("finish", weight_version))


class RecordingNCCL:
    """``torch.cuda.nccl``'s four functions, recording what the trainer's rank 0 does."""

    def __init__(self) -> None:
        self.events: list[tuple] = []

    def unique_id(self) -> bytes:
        return bytes(range(128))

    def init_rank(self, world_size, unique_id, rank):
        self.events.append(("init_rank", world_size, unique_id, rank))
        return "comm"

    def all_reduce(self, inputs, comms):
        self.events.append(("all_reduce", [(t.dtype, t.numel(), float(t.sum())) for t in inputs], comms))

    def broadcast(self, inputs, root, comms):
        self.events.append(("broadcast", [t.clone() for t in inputs], root, comms))


def small_stream() -> WeightStream:
    weights = [("model.a.weight", torch.ones(2, 3)), ("model.b.bias", torch.arange(4.0))]
    specs = [WeightSpec(name, torch.bfloat16, tuple(t.shape)) for name, t in weights]
    return WeightStream(specs, lambda: iter(weights))


def test_nccl_sender_joins_as_rank_zero_with_vllm_unique_id_payload():
    api, nccl = RecordingAPI(), RecordingNCCL()
    sender = NCCLWeightSender(torch.device("cpu"), nccl=nccl)
    sender.connect(api, {"world_size": 2})  # e.g. tensor parallelism 2 on the server
    ((kind, payload),) = api.calls
    assert kind == "init" and payload["rank_offset"] == 1 and payload["world_size"] == 3 and payload["packed"] is False
    assert (
        "master_address" not in payload
        and base64.b64decode(payload["nccl_unique_id_b64"], validate=True) == nccl.unique_id()
    )
    assert nccl.events[0] == ("init_rank", 3, nccl.unique_id(), 0)
    assert nccl.events[1] == ("all_reduce", [(torch.float32, 1, 0.0)], ["comm"])  # vLLM's warm-up collective


def test_nccl_sender_broadcasts_the_declared_tensors_in_order_inside_one_session():
    api, nccl = RecordingAPI(), RecordingNCCL()
    sender = NCCLWeightSender(torch.device("cpu"), nccl=nccl)
    sender.connect(api, {"world_size": 1})
    sender.send(api, small_stream(), "genalign-v7")
    kinds = [kind for kind, _ in api.calls]
    assert kinds == ["init", "start", "update", "finish"] and api.calls[-1] == ("finish", "genalign-v7")
    assert api.calls[2][1] == {
        "names": ["model.a.weight", "model.b.bias"],
        "dtype_names": ["bfloat16", "bfloat16"],
        "shapes": [[2, 3], [4]],
    }
    sent = [event[1][0] for event in nccl.events if event[0] == "broadcast"]
    assert [t.dtype for t in sent] == [torch.bfloat16] * 2
    assert torch.equal(sent[1], torch.arange(4.0).bfloat16())


def test_nccl_sender_raises_the_server_refusal_instead_of_finishing():
    api = RecordingAPI(refuse_update=True)
    sender = NCCLWeightSender(torch.device("cpu"), nccl=RecordingNCCL())
    sender.connect(api, {"world_size": 1})
    with pytest.raises(RuntimeError, match="Invalid update_info"):
        sender.send(api, small_stream(), "v")
    assert "finish" not in [kind for kind, _ in api.calls]


def test_nccl_sender_refuses_tensors_beyond_the_nccl_count():
    sender = NCCLWeightSender(torch.device("cpu"), nccl=RecordingNCCL())
    sender.connect(RecordingAPI(), {"world_size": 1})
    huge = WeightStream([WeightSpec("model.embed_tokens.weight", torch.bfloat16, (2**20, 2**11))], lambda: iter([]))
    with pytest.raises(ValueError, match=r"model\.embed_tokens\.weight has more than"):
        sender.send(RecordingAPI(), huge, "v")


def test_ipc_sender_ships_pickled_handles_in_declared_order():
    exported = []
    sender = IPCWeightSender(torch.device("cpu"), export=lambda t: exported.append(t) or {"gpu-0": (t.shape, t.dtype)})
    api = RecordingAPI()
    sender.connect(api, {})
    sender.send(api, small_stream(), "v2")
    assert [kind for kind, _ in api.calls] == ["init", "start", "update", "finish"]
    assert api.calls[0][1] == {"packed": False}
    update = api.calls[2][1]
    handles = pickle.loads(base64.b64decode(update["ipc_handles_pickled"]))
    assert handles == [{"gpu-0": (torch.Size([2, 3]), torch.bfloat16)}, {"gpu-0": (torch.Size([4]), torch.bfloat16)}]
    assert update["names"] == ["model.a.weight", "model.b.bias"] and all(t.dtype == torch.bfloat16 for t in exported)


def test_a_stream_that_diverges_from_its_declaration_raises(model_dir):
    stream = weight_stream(load(model_dir), merge_adapters=False, dtype=torch.float32)
    stream.specs[3] = WeightSpec("model.wrong", torch.float32, stream.specs[3].shape)
    with pytest.raises(RuntimeError, match="weight stream item 3 is"):
        list(stream.tensors(torch.device("cpu")))


def test_sharded_parameters_are_refused_with_the_fix(model_dir):
    class ShardedParameter(torch.nn.Parameter):  # what FSDP2 leaves outside its gathered-parameters context
        def full_tensor(self):
            return self

    model = load(model_dir)
    model.model.norm.weight = ShardedParameter(model.model.norm.weight.detach().clone())
    backend = FakeVLLMBackend(model_dir)
    sync = WeightSync(model, backend, LoopbackSender(backend), use_adapter=False)
    with pytest.raises(RuntimeError, match=r"'model\.norm\.weight' is sharded .* gathered-parameters context"):
        sync.ensure_current()
    assert "start" not in backend.calls
