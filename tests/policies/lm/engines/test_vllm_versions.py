"""policy.vllm options, the server command line, and the version / settings checks with the fix in each error."""

from __future__ import annotations

import importlib.metadata
import shlex

import pytest

from genalign.config.core import ConfigError, from_dict
from genalign.policies.lm.causal import CausalLMPolicyConfig
from genalign.policies.lm.engines.vllm.options import VLLMOptions, server_command
from genalign.policies.lm.engines.vllm.server import PROTOCOL_VERSION, build_parser, kwargs_from_args
from genalign.policies.lm.engines.vllm.versions import (
    check_colocated_environment,
    check_server_info,
    check_server_settings,
)


# ---- options and config loading -------------------------------------------------------------------------------------
def test_defaults_validate_and_every_engine_keeps_working():
    for engine in ("hf", "static", "vllm"):
        config = from_dict(CausalLMPolicyConfig, {"engine": engine})
        assert config.vllm == VLLMOptions()


def test_nested_vllm_options_load_strictly_from_yaml_dicts():
    config = from_dict(
        CausalLMPolicyConfig,
        {"engine": "vllm", "vllm": {"tensor_parallel_size": 4, "gpu_memory_utilization": 0.85, "lora": "merged"}},
    )
    assert (config.vllm.tensor_parallel_size, config.vllm.memory_fraction(), config.vllm.lora) == (4, 0.85, "merged")
    with pytest.raises(ConfigError, match="Did you mean 'tensor_parallel_size'"):
        from_dict(CausalLMPolicyConfig, {"vllm": {"tensor_parallel": 2}})


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"server_url": "localhost:8000"}, "must start with http:// or https://"),
        ({"gpu_memory_utilization": 1.5}, r"gpu_memory_utilization=1.5 must be in \(0, 1\]"),
        ({"mode": "colocated", "tensor_parallel_size": 2}, "needs a server on GPUs of its own"),
        ({"weight_transfer": "ipc", "tensor_parallel_size": 2}, "runs with tensor_parallel_size: 1"),
        ({"mode": "colocated", "weight_transfer": "nccl"}, "which NCCL cannot do"),
        ({"sleep": True}, "only applies when vLLM shares the trainer's GPU"),
        ({"tensor_parallel_size": 0}, "tensor_parallel_size=0 must be >= 1"),
    ],
)
def test_invalid_options_name_the_field_and_the_fix(options, message):
    with pytest.raises(ConfigError, match=message):
        from_dict(CausalLMPolicyConfig, {"engine": "vllm", "vllm": options})


def test_top_p_with_vllm_is_refused_at_config_load_with_the_reason():
    with pytest.raises(ConfigError, match=r"policy.top_k=0 / policy.top_p=0.9 with policy.engine=vllm"):
        from_dict(CausalLMPolicyConfig, {"engine": "vllm", "top_p": 0.9})
    from_dict(CausalLMPolicyConfig, {"engine": "static", "top_p": 0.9})  # other engines keep top-p


def test_transfer_memory_and_sleep_defaults_follow_where_vllm_runs():
    server = VLLMOptions()
    assert (server.transfer(), server.memory_fraction(), server.sleeps()) == ("nccl", 0.9, False)
    for shared_gpu in (VLLMOptions(mode="colocated"), VLLMOptions(weight_transfer="ipc")):
        assert (shared_gpu.transfer(), shared_gpu.memory_fraction(), shared_gpu.sleeps()) == ("ipc", 0.4, True)
    assert not VLLMOptions(mode="colocated", sleep=False).sleeps()


def test_server_command_on_the_trainers_gpu_listens_locally_and_sleeps():
    command = server_command(VLLMOptions(server_url="http://10.0.0.5:9000", weight_transfer="ipc"), "/m")
    assert "--host 127.0.0.1 --port 9000" in command and "--gpu-memory-utilization 0.4" in command
    assert command.endswith("--weight-transfer ipc --enable-sleep-mode")
    kwargs = kwargs_from_args(build_parser().parse_args(shlex.split(command)[3:]))
    assert kwargs["weight_transfer_config"] == {"backend": "ipc"} and kwargs["enable_sleep_mode"] is True


def test_server_command_reflects_the_options_and_parses_back_to_the_same_settings():
    options = VLLMOptions(server_url="http://10.0.0.5:9000", tensor_parallel_size=2, enable_prefix_caching=False)
    command = server_command(options, "/models/qwen", lora_rank=24)
    argv = shlex.split(command)
    assert argv[:3] == ["python", "-m", "genalign.policies.lm.engines.vllm.server"]
    kwargs = kwargs_from_args(build_parser().parse_args(argv[3:]))
    assert kwargs == {
        "model": "/models/qwen",
        "tensor_parallel_size": 2,
        "gpu_memory_utilization": 0.9,
        "enable_prefix_caching": False,
        "dtype": "auto",
        "enable_sleep_mode": False,
        "logprobs_mode": "processed_logprobs",  # the sampled token's log-prob after temperature
        "weight_transfer_config": {"backend": "nccl"},
        "seed": 0,
        "enable_lora": True,
        "max_lora_rank": 32,  # the smallest vLLM rank >= 24
        "max_loras": 1,
    }
    assert "--host 0.0.0.0 --port 9000" in command
    assert "--enable-lora" not in server_command(VLLMOptions(lora="merged"), "m", lora_rank=8)


# ---- server checks --------------------------------------------------------------------------------------------------
INFO = {
    "protocol": PROTOCOL_VERSION,
    "vllm_version": "0.33.0",
    "nccl_version": [2, 30, 7],
    "weight_transfer_backend": "nccl",
    "tensor_parallel_size": 1,
    "gpu_memory_utilization": 0.9,
    "enable_prefix_caching": True,
    "lora_enabled": True,
    "max_lora_rank": 16,
}


@pytest.mark.parametrize(
    ("change", "local_nccl", "message"),
    [
        ({"protocol": PROTOCOL_VERSION + 1}, (2, 30, 7), "same genalign checkout"),
        ({"vllm_version": "0.15.1"}, (2, 30, 7), r"genalign needs vLLM >= 0\.33\.0"),
        ({"nccl_version": [2, 27, 3]}, (2, 30, 7), r"NCCL 2\.27\.3 on the vLLM server vs 2\.30\.7 in the trainer"),
    ],
)
def test_server_info_mismatches_raise_with_both_sides(change, local_nccl, message):
    with pytest.raises(RuntimeError, match=message):
        check_server_info(INFO | change, local_nccl=local_nccl)


def test_matching_server_info_passes():
    check_server_info(INFO, local_nccl=(2, 30, 1))
    check_server_info(INFO | {"weight_transfer_backend": "ipc", "nccl_version": [1, 0, 0]}, local_nccl=(2, 30, 1))


def test_server_settings_mismatch_prints_the_command_to_restart_it():
    with pytest.raises(ValueError, match=r"tensor_parallel_size=2 but the server .* runs with 1; restart it with: py"):
        check_server_settings(INFO, VLLMOptions(tensor_parallel_size=2), model_path="m", lora_rank=0)
    with pytest.raises(ValueError, match="--tensor-parallel-size 2"):
        check_server_settings(INFO, VLLMOptions(tensor_parallel_size=2), model_path="m", lora_rank=0)
    with pytest.raises(ValueError, match=r"weight_transfer_backend='ipc' but the server .*--weight-transfer ipc"):
        check_server_settings(
            INFO, VLLMOptions(weight_transfer="ipc", gpu_memory_utilization=0.9), model_path="m", lora_rank=0
        )
    ipc_server = INFO | {"weight_transfer_backend": "ipc", "enable_sleep_mode": False}
    with pytest.raises(ValueError, match=r"enable_sleep_mode=True but the server .*--enable-sleep-mode"):
        check_server_settings(
            ipc_server, VLLMOptions(weight_transfer="ipc", gpu_memory_utilization=0.9), model_path="m", lora_rank=0
        )
    with pytest.raises(ValueError, match=r"lora_enabled=True but the server"):
        check_server_settings(INFO | {"lora_enabled": False}, VLLMOptions(lora="adapter"), model_path="m", lora_rank=8)
    with pytest.raises(ValueError, match=r"policy\.lora\.rank=64 exceeds the server's max_lora_rank=16"):
        check_server_settings(INFO, VLLMOptions(lora="adapter"), model_path="m", lora_rank=64)
    check_server_settings(INFO, VLLMOptions(), model_path="m", lora_rank=64)  # auto: merged weights instead
    check_server_settings(INFO, VLLMOptions(), model_path="m", lora_rank=16)
    check_server_settings(INFO, VLLMOptions(lora="merged"), model_path="m", lora_rank=64)


# ---- colocated environment ------------------------------------------------------------------------------------------
VLLM_REQUIRES = ["torch==2.14.0", "transformers<5.21.0,>=5.16.1", "zentorch==2.14.0.1; extra == 'zen'", "numpy"]


def fake_env(**versions):
    def version(name):
        if name not in versions:
            raise importlib.metadata.PackageNotFoundError(name)
        return versions[name]

    return {"version": version, "requires": lambda name: VLLM_REQUIRES}


def test_colocated_without_vllm_points_to_the_server_mode():
    with pytest.raises(ImportError, match=r"policy\.vllm\.mode: server"):
        check_colocated_environment(**fake_env(torch="2.14.1"), cuda_available=lambda: True)


def test_colocated_with_genalign_pins_names_both_versions_and_the_fix():
    env = fake_env(vllm="0.33.0", torch="2.14.1+cu130", transformers="5.24.0")
    with pytest.raises(ImportError, match=r"vllm 0\.33\.0 requires torch==2\.14\.0 but this environment has torch 2"):
        check_colocated_environment(**env, cuda_available=lambda: True)
    env = fake_env(vllm="0.33.0", torch="2.14.0+cu130", transformers="5.24.0")
    with pytest.raises(ImportError, match=r"requires transformers<5\.21\.0,>=5\.16\.1 .* transformers 5\.24\.0"):
        check_colocated_environment(**env, cuda_available=lambda: True)


def test_colocated_with_vllm_pins_needs_only_a_gpu():
    env = fake_env(vllm="0.33.0", torch="2.14.0+cu130", transformers="5.20.1")
    check_colocated_environment(**env, cuda_available=lambda: True)
    with pytest.raises(RuntimeError, match="needs a CUDA GPU; on CPU use engine='static'"):
        check_colocated_environment(**env, cuda_available=lambda: False)
    with pytest.raises(ImportError, match=r"vllm 0\.15\.0 is installed"):
        check_colocated_environment(**fake_env(vllm="0.15.0"), cuda_available=lambda: True)


def test_this_environment_refuses_colocated_vllm_clearly():
    """genalign's own environment holds no vLLM (its pins conflict): the guard says what to do."""
    try:
        importlib.metadata.version("vllm")
    except importlib.metadata.PackageNotFoundError:
        with pytest.raises(ImportError, match="run vLLM as a separate server"):
            check_colocated_environment()
    else:
        pytest.skip("vllm is installed in this environment")
