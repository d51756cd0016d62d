"""Reward models that sit on a GPU: which rewards load a network, which network, and where.

Only rewards whose ``device`` argument puts them on a GPU (``cuda...``, or ``auto`` on a GPU machine) count against
GPU memory; the others run on the CPU. The network's architecture is read from the reward's arguments, with the
reward class's own defaults (its signature) for arguments the config leaves out; its weights are float32 (the rewards
load them without a dtype). A wrapper such as ``video_frames`` is followed to the reward it wraps.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from genalign.planning.architectures import CLIP_VIT_H14, ComponentSpec

#: reward name -> (library of its network, the argument that names the network)
REWARD_NETWORKS: dict[str, tuple[str, str]] = {
    "pickscore": ("transformers_folder", "model_path"),
    "hpsv2": ("open_clip", "model"),
    "clip_score": ("open_clip", "model"),
    "aesthetic": ("open_clip", "clip_model"),
    "reward_model": ("transformers_folder", "model_path"),
    "llm_judge": ("transformers_folder", "model_path"),
}
#: rewards that wrap another reward: name -> (argument naming the inner reward, argument holding its arguments)
WRAPPERS = {"video_frames": ("reward", "args")}


@dataclass(frozen=True)
class RewardNetwork:
    """A reward network on the GPU: its label, architecture and where the architecture came from."""

    label: str
    spec: ComponentSpec
    source: str


def _defaults(name: str) -> dict[str, Any]:
    from genalign.rewards import reward_factory

    factory = reward_factory(name)
    target = factory.__init__ if isinstance(factory, type) else factory
    return {k: p.default for k, p in inspect.signature(target).parameters.items() if p.default is not p.empty}


def _on_gpu(device: str) -> bool:
    return device.startswith("cuda") or device == "auto"


def _network(name: str, args: dict[str, Any], label: str) -> RewardNetwork | None:
    if name in WRAPPERS:
        inner, inner_args = WRAPPERS[name]
        return _network(args[inner], args.get(inner_args, {}), label)
    if name not in REWARD_NETWORKS:
        return None
    values = {**_defaults(name), **args}
    if not _on_gpu(str(values.get("device", "cpu"))):
        return None
    library, argument = REWARD_NETWORKS[name]
    if library == "open_clip":
        return RewardNetwork(label, ComponentSpec("open_clip", values[argument]), f"open_clip {values[argument]}")
    folder = values.get(argument)
    if folder is None and name == "llm_judge":  # a judge served remotely (base_url): no local network
        return None
    if folder and (Path(folder) / "config.json").is_file():
        from genalign.planning.model_specs import resolve_model_spec

        return RewardNetwork(label, resolve_model_spec(folder, field=f"rewards.{label}.args.{argument}")
                             .components["model"], str(folder))  # fmt: skip
    if name == "pickscore":
        return RewardNetwork(label, CLIP_VIT_H14, "PickScore_v1 = CLIP ViT-H/14 (its folder is not on this machine)")
    raise ValueError(
        f"rewards.{label}.args.{argument} = {folder!r} is not a model folder on this machine; genalign plan reads its "
        "config.json to count the reward model. Give the folder, or run the reward on the CPU (device: cpu)."
    )


def reward_networks(config) -> list[RewardNetwork]:
    """The reward networks of ``config`` that sit on a GPU."""
    found = []
    for spec in config.rewards:
        if isinstance(spec.fn, str):
            network = _network(spec.fn, dict(spec.args), spec.label)
            if network is not None:
                found.append(network)
    return found


__all__ = ["REWARD_NETWORKS", "RewardNetwork", "reward_networks"]
