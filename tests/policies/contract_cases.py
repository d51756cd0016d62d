"""Tiny training configs of every policy family and training mode, for the adapter contract test.

Each case is a complete config (the committed demo models, procedural data, a test reward that reads any output) small
enough to train a few steps on CPU in seconds, and chosen to exercise the family's resumable state: inner epochs and
minibatches (optimizer state, re-scored old log-probs, fresh diffusion masks per epoch), EMA weights, sliding windows
and tree splits, DiffusionNFT's old model, the samplers' random generators; multi-turn rollouts of the causal LM
(a scripted text environment) and of the VLM (the crop tool returning an image each turn, of two sizes).
"""

from __future__ import annotations

import copy
from typing import Any

ARITHMETIC = {"source": "procedural:arithmetic", "args": {"size": 64, "seed": 0, "digits": 2, "split": "train"}}
SHAPES_T2I = {
    "source": "procedural:shapes_t2i",
    "args": {"size": 64, "seed": 0, "split": "train", "templates": ["count"]},
}
SHAPES_VQA = {
    "source": "procedural:shapes_vqa",
    "args": {"size": 64, "seed": 0, "split": "train", "kinds": ["count"], "colors": ["red"], "shape_kinds": ["circle"]},
}
#: a chat template for the demo model's character vocabulary: messages written one after the other, an assistant turn
#: closed by a space, so that a multi-turn episode reads "12+34=46 +1=47 "
ARITH_CHAT_TEMPLATE = (
    "{% for m in messages %}{{ m['content'] }}{% if m['role'] == 'assistant' %} {% endif %}{% endfor %}"
)
COMMON: dict[str, Any] = {
    "rewards": [{"fn": "contract_reward", "name": "score"}],
    "optim": {"lr": 1.0e-3, "max_grad_norm": 1.0},
    "eval": {"at_start": False},
    "run": {"seed": 0, "max_steps": 4, "save_every": 2, "keep_last": 3, "sample_every": 0, "num_threads": 1,
            "progress_bar": False},
}  # fmt: skip
LM_ALGORITHM = {"group_size": 4, "prompts_per_step": 2, "micro_batch_size": 4, "inner_epochs": 2, "minibatches": 2}
FLOW_POLICY = {
    "family": "flow", "model": "builtin:shapes-t2i-faded", "architecture": "sd3", "height": 32, "width": 32,
    "num_steps": 4, "eval_num_steps": 2, "guidance_scale": 1.0, "max_sequence_length": 1,
    "lora": {"rank": 4, "alpha": 8.0}, "ema_decay": 0.5, "sample_batch_size": 4,
}  # fmt: skip
FLOW_ALGORITHM = {"group_size": 4, "prompts_per_step": 2, "micro_batch_size": 4, "inner_epochs": 2}

#: case id -> (family, config). Every family of genalign.policies.FAMILY_MODULES needs at least one case.
CASES: dict[str, tuple[str, dict[str, Any]]] = {
    "causal_lm": ("causal_lm", {
        "policy": {"family": "causal_lm", "model": "builtin:arith-lm", "max_prompt_tokens": 16, "max_new_tokens": 4},
        "data": {"train": ARITHMETIC},
        "algorithm": LM_ALGORITHM | {"kl_coef": 0.01},
    }),
    "causal_lm_multi_turn": ("causal_lm", {
        "policy": {"family": "causal_lm", "model": "builtin:arith-lm", "max_prompt_tokens": 16, "max_new_tokens": 4,
                   "use_chat_template": True, "chat_template": ARITH_CHAT_TEMPLATE,
                   "multi_turn": {"environments": {"name": "tests.policies.lm.scripted_environments:Scripted",
                                                   "turns": 2, "reward": None}, "max_turns": 3}},
        "data": {"train": ARITHMETIC},
        "algorithm": LM_ALGORITHM | {"kl_coef": 0.01},
    }),
    "vlm": ("vlm", {
        "policy": {"family": "vlm", "model": "builtin:shapes-vlm", "min_pixels": 256, "max_pixels": 2304,
                   "max_new_tokens": 6, "freeze_vision_tower": True, "temperature": 3.0},
        "data": {"train": SHAPES_VQA},
        "algorithm": LM_ALGORITHM,
    }),
    "vlm_multi_turn": ("vlm", {
        "policy": {"family": "vlm", "model": "builtin:shapes-vlm", "min_pixels": 256, "max_pixels": 2304,
                   "max_new_tokens": 6, "freeze_vision_tower": True, "temperature": 3.0,
                   "multi_turn": {"environments": "tests.policies.vlm.scripted_environments:ScriptedCrop",
                                  "max_turns": 3}},
        "data": {"train": SHAPES_VQA},
        "algorithm": LM_ALGORITHM,
    }),
    "diffusion_lm": ("diffusion_lm", {
        "policy": {"family": "diffusion_lm", "model": "builtin:arith-dlm", "max_prompt_tokens": 16, "gen_length": 4,
                   "block_length": 4, "steps": 4, "likelihood_proxy": {"name": "mc_elbo", "num_samples": 2}},
        "data": {"train": ARITHMETIC},
        "algorithm": LM_ALGORITHM,
    }),
    "flow_sde": ("flow", {
        "policy": FLOW_POLICY | {"train_steps": {"strategy": "sliding_window", "window_size": 2, "advance_every": 1}},
        "data": {"train": SHAPES_T2I},
        "algorithm": FLOW_ALGORITHM,
    }),
    "flow_tree": ("flow", {
        "policy": FLOW_POLICY | {"tree": {"enabled": True, "split_steps": [0, 2], "branching": 2, "slide_every": 2}},
        "data": {"train": SHAPES_T2I},
        "algorithm": FLOW_ALGORITHM | {"credit": ["tree", "noise_aware_steps"]},
    }),
    "flow_nft": ("flow", {
        "policy": FLOW_POLICY | {"likelihood_free": {"method": "nft", "num_timesteps": 2, "old_decay": 0.5}},
        "data": {"train": SHAPES_T2I},
        "algorithm": FLOW_ALGORITHM | {"objective": {"name": "nft", "beta": 1.0}},
    }),
}  # fmt: skip


def case_config(case: str, output_dir: str) -> dict[str, Any]:
    """The full config dict of ``case`` writing to ``output_dir``."""
    _, sections = CASES[case]
    config = copy.deepcopy(COMMON) | copy.deepcopy(sections)
    config["run"] = copy.deepcopy(COMMON["run"]) | {"output_dir": output_dir}
    return resolve_tiny_models(config)


# ---- source-conditioned flow architectures: image-to-image, editing, image-to-video ------------------------------------
#: ``policy.model: "tiny-flow:<architecture>"``: that architecture's tiny random pipeline (``tiny_pipeline``), written
#: once per process into a temporary folder by :func:`resolve_tiny_models` (no committed weights for test-only models).
TINY_FLOW_PREFIX = "tiny-flow:"
_TINY_FLOW_DIRS: dict[str, str] = {}
SHAPES_EDIT = {"source": "procedural:shapes_edit", "args": {"size": 64, "seed": 0, "split": "train"}}
TINY_FLOW_POLICY = FLOW_POLICY | {"height": 16, "width": 16, "max_sequence_length": 8}
CASES |= {
    "flow_img2img": ("flow", {
        "policy": FLOW_POLICY | {"architecture": "sd3_img2img", "strength": 0.75},
        "data": {"train": SHAPES_EDIT},
        "algorithm": FLOW_ALGORITHM,
    }),
    "flow_kontext": ("flow", {
        "policy": TINY_FLOW_POLICY | {"model": TINY_FLOW_PREFIX + "flux_kontext", "architecture": "flux_kontext",
                                      "guidance_scale": 3.5},
        "data": {"train": SHAPES_EDIT},
        "algorithm": FLOW_ALGORITHM,
    }),
    "flow_i2v": ("flow", {
        "policy": TINY_FLOW_POLICY | {"model": TINY_FLOW_PREFIX + "wan_i2v", "architecture": "wan_i2v", "num_frames": 5,
                                      "guidance_scale": 2.0},
        "data": {"train": SHAPES_EDIT},
        "algorithm": FLOW_ALGORITHM,
    }),
}  # fmt: skip


def resolve_tiny_models(config: dict[str, Any]) -> dict[str, Any]:
    """``config`` with a ``tiny-flow:<architecture>`` model replaced by the folder of that tiny pipeline."""
    model = config["policy"].get("model", "")
    if model.startswith(TINY_FLOW_PREFIX):
        import tempfile

        from genalign.pipelines.tiny_models import save_tiny_pipeline

        name = model[len(TINY_FLOW_PREFIX) :]
        if name not in _TINY_FLOW_DIRS:
            _TINY_FLOW_DIRS[name] = str(save_tiny_pipeline(name, tempfile.mkdtemp(prefix=f"genalign-tiny-{name}-")))
        config["policy"]["model"] = _TINY_FLOW_DIRS[name]
    return config
