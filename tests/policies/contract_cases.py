"""Tiny training configs of every policy family and training mode, for the adapter contract test.

Each case is a complete config (the committed demo models, procedural data, a test reward that reads any output) small
enough to train a few steps on CPU in seconds, and chosen to exercise the family's resumable state: inner epochs and
minibatches (optimizer state, re-scored old log-probs, fresh diffusion masks per epoch), EMA weights, sliding windows
and tree splits, DiffusionNFT's old model, the samplers' random generators; multi-turn rollouts of the causal LM
(a scripted text environment; once more with turn-level trees, resampled turns and thinking interventions) and of the
VLM (the crop tool returning an image each turn, of two sizes).
"""

from __future__ import annotations

import atexit
import copy
import functools
import shutil
import tempfile
from pathlib import Path
from typing import Any

from genalign.pipelines.architectures import FLOW_ARCHITECTURES

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
    "causal_lm_multi_turn_agents": ("causal_lm", {  # turn-level trees, T²PO's rollout control, TRIAGE's roles
        "policy": {"family": "causal_lm", "model": "builtin:arith-lm", "max_prompt_tokens": 16, "max_new_tokens": 4,
                   "use_chat_template": True, "chat_template": ARITH_CHAT_TEMPLATE,
                   "multi_turn": {"environments": {"name": "tests.policies.lm.scripted_environments:Scripted",
                                                   "turns": 3, "reward": None}, "max_turns": 3,
                                  "tree": {"enabled": True, "split_turns": [1], "branching": [2],
                                           "trees_per_prompt": 2},
                                  "resample_turns": {"max_resamples": 1},
                                  "thinking_intervention": {"text": "+", "window": 1, "threshold": 0.5}}},
        "data": {"train": ARITHMETIC},
        "algorithm": LM_ALGORITHM | {"kl_coef": 0.01, "credit": ["tree_grpo", "triage"]},
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
    config["policy"]["model"] = model_folder(config["policy"]["model"])
    return config


# ---- the architecture matrix: every causal-LM and diffusion-LM architecture genalign supports, built tiny from its
# real config class (genalign.policies.lm.tiny, genalign.policies.dlm.tiny); Llama is the "causal_lm" case above
# (builtin:arith-lm). The folders are written once per content of the builders (a hash in the folder name), so the
# training subprocesses and later runs reuse them.
def _tiny_model_folder(kind: str, name: str) -> str:
    import hashlib
    import os
    import shutil
    import tempfile
    from pathlib import Path

    import genalign.policies.dlm.tiny as dlm_tiny
    import genalign.policies.lm.tiny as lm_tiny

    sources = b"".join(Path(module.__file__).read_bytes() for module in (lm_tiny, dlm_tiny))
    digest = hashlib.sha256(sources + kind.encode() + name.encode()).hexdigest()[:12]
    folder = Path(tempfile.gettempdir()) / "genalign-contract-models" / f"{kind}-{name}-{digest}"
    if not (folder / "config.json").exists():
        staging = folder.with_name(f"{folder.name}.{os.getpid()}")
        if kind == "causal_lm":
            lm_tiny.build_tiny_causal_lm(staging, architecture=name, vocab_size=96)
        else:
            dlm_tiny.build_tiny_diffusion_lm(staging, style=name, vocab_size=96)
        if folder.exists():  # another process wrote it first
            shutil.rmtree(staging)
        else:
            os.replace(staging, folder)
    return str(folder)


def _architecture_cases() -> dict[str, tuple[str, dict[str, Any]]]:
    from genalign.policies.dlm.tiny import DIFFUSION_STYLES

    cases: dict[str, tuple[str, dict[str, Any]]] = {}
    for architecture in ("qwen2", "qwen3", "qwen3_moe", "gemma3"):
        cases[f"causal_lm_{architecture}"] = ("causal_lm", {
            "policy": {"family": "causal_lm", "model": _tiny_model_folder("causal_lm", architecture),
                       "max_prompt_tokens": 16, "max_new_tokens": 4},
            "data": {"train": ARITHMETIC},
            "algorithm": LM_ALGORITHM | {"kl_coef": 0.01},
        })  # fmt: skip
    proxies = {"llada": {"name": "one_step"}, "dream": {"name": "coupled"}}  # as in their presets (d1, coupled-GRPO)
    for style, conventions in DIFFUSION_STYLES.items():
        cases[f"diffusion_lm_{style}"] = ("diffusion_lm", {
            "policy": {"family": "diffusion_lm", "model": _tiny_model_folder("diffusion_lm", style),
                       **conventions.policy_options(), "max_prompt_tokens": 16, "gen_length": 4, "block_length": 4,
                       "steps": 4, "likelihood_proxy": proxies[style]},
            "data": {"train": ARITHMETIC},
            "algorithm": LM_ALGORITHM,
        })  # fmt: skip
    return cases


CASES |= _architecture_cases()
# --- VLM architecture matrix: one case per architecture of genalign.policies.vlm.architectures, on tiny random models
# built from the real transformers classes (tests/policies/vlm/tiny_models.py); Qwen2-VL is the "vlm" case above.
# Qwen3-VL takes native videos of the shapes_video task (frames through the processor's video path).
from tests.policies.vlm.tiny_models import tiny_model_dir  # noqa: E402

SHAPES_VIDEO = {
    "source": "procedural:shapes_video",
    "args": {"size": 64, "seed": 0, "split": "train", "kinds": ["frames"], "num_frames": 4},
}
VLM_ARCHITECTURE_POLICY = {
    "family": "vlm", "min_pixels": 256, "max_pixels": 2304, "max_new_tokens": 6, "freeze_vision_tower": True,
    "temperature": 3.0,
}  # fmt: skip
CASES |= {
    f"vlm_{name}": ("vlm", {
        "policy": VLM_ARCHITECTURE_POLICY | {"model": tiny_model_dir(model_type), **extra},
        "data": {"train": data},
        "algorithm": LM_ALGORITHM,
    })
    for name, model_type, data, extra in (
        ("qwen2_5_vl", "qwen2_5_vl", SHAPES_VQA, {}),
        ("qwen3_vl_video", "qwen3_vl", SHAPES_VIDEO, {"max_frames": 4}),
        ("gemma3", "gemma3", SHAPES_VQA, {}),
        ("idefics3", "idefics3", SHAPES_VQA, {}),
        ("llava_onevision", "llava_onevision", SHAPES_VQA, {}),
    )
}  # fmt: skip


# ---- the flow architecture matrix ------------------------------------------------------------------------------------
# Every registered flow architecture on its own tiny random pipeline (``save_tiny_pipeline``), at the smallest sizes
# that still run every part: 16 px (Sana 32), 2 steps, groups of 2, classifier-free guidance on (Qwen-Image's norm-preserving
# rule, Klein's negative branch), all steps stochastic and trained.
#: a ``policy.model`` value ``tiny-pipeline:<architecture>``: the tiny pipeline of that architecture, written once per
#: process into a temporary folder (removed at exit)
TINY_PIPELINE = "tiny-pipeline:"
#: prompt tokens per architecture (FLUX.2 [dev]'s system message alone takes about 40)
_SEQUENCE_LENGTH = {"flux2": 64}
#: image sizes other than 16 px: Sana's pipeline takes multiples of 32 only
_SIZE = {"sana": 32}


def model_folder(model: str) -> str:
    """``model``, or for ``tiny-pipeline:<architecture>`` the folder of that tiny pipeline (built on first use)."""
    if not model.startswith(TINY_PIPELINE):
        return model
    return str(_tiny_pipeline_folder(model.removeprefix(TINY_PIPELINE)))


@functools.cache
def _tiny_pipeline_folder(architecture: str) -> Path:
    from genalign.pipelines.tiny_models import save_tiny_pipeline

    return save_tiny_pipeline(architecture, _tiny_root() / architecture)


@functools.cache
def _tiny_root() -> Path:
    root = Path(tempfile.mkdtemp(prefix="genalign-tiny-pipelines-"))
    atexit.register(shutil.rmtree, root, ignore_errors=True)
    return root


def _architecture_case(architecture: str) -> tuple[str, dict[str, Any]]:
    policy = {
        "family": "flow",
        "model": TINY_PIPELINE + architecture,
        "architecture": architecture,
        "height": _SIZE.get(architecture, 16),
        "width": _SIZE.get(architecture, 16),
        "num_frames": 5 if architecture == "wan" else 1,
        "num_steps": 2,
        "eval_num_steps": 2,
        "guidance_scale": 2.0,
        "max_sequence_length": _SEQUENCE_LENGTH.get(architecture, 8),
        "lora": {"rank": 2, "alpha": 4.0},
        "sample_batch_size": 8,
    }
    algorithm = {"group_size": 2, "prompts_per_step": 4, "micro_batch_size": 4}
    return "flow", {"policy": policy, "data": {"train": SHAPES_T2I}, "algorithm": algorithm}


#: architectures with cases of their own (video sizes and frame rates above; source images below)
_OWN_CASES = {"wan22", "wan22_ti2v", "sd3_img2img", "flux_kontext", "wan_i2v", "qwen_image_edit", "flux2_edit",
              "flux2_klein_edit", "wan22_ti2v_i2v", "hunyuan_video15", "hunyuan_video15_i2v"}  # fmt: skip
#: case ids of the architecture matrix (left out where a test runs families, not architectures: sharded training)
ARCHITECTURE_CASES = [f"flow_arch_{name}" for name in FLOW_ARCHITECTURES.names() if name not in _OWN_CASES]
CASES |= {case: _architecture_case(case.removeprefix("flow_arch_")) for case in ARCHITECTURE_CASES}


# ---- video architectures (Wan2.2 A14B's two experts, Wan2.2 TI2V-5B's per-token timesteps) on their tiny pipelines
VIDEO_POLICY = FLOW_POLICY | {"num_frames": 5, "fps": 8, "num_steps": 3, "eval_num_steps": 2, "guidance_scale": 2.0,
                              "ema_decay": 0.0, "architecture": "auto", "max_sequence_length": 8}  # fmt: skip
CASES |= {
    "flow_wan22": ("flow", {
        "policy": VIDEO_POLICY | {"model": TINY_PIPELINE + "wan22", "height": 16, "width": 16},
        "data": {"train": SHAPES_T2I},
        "algorithm": FLOW_ALGORITHM,
    }),
    "flow_wan22_ti2v": ("flow", {
        "policy": VIDEO_POLICY | {"model": TINY_PIPELINE + "wan22_ti2v", "height": 32, "width": 32},
        "data": {"train": SHAPES_T2I},
        "algorithm": FLOW_ALGORITHM,
    }),
    # HunyuanVideo 1.5: its tiny VAE packs 2 frames per latent (5 frames: 3 latent frames of 4 x 4), 2 steps
    "flow_hunyuan_video15": ("flow", {
        "policy": VIDEO_POLICY | {"model": TINY_PIPELINE + "hunyuan_video15", "height": 16, "width": 16,
                                  "num_steps": 2},
        "data": {"train": SHAPES_T2I},
        "algorithm": FLOW_ALGORITHM,
    }),
}  # fmt: skip


# ---- source-conditioned flow architectures: image-to-image, editing, image-to-video, on the editing task's rows
SHAPES_EDIT = {"source": "procedural:shapes_edit", "args": {"size": 64, "seed": 0, "split": "train"}}
TINY_FLOW_POLICY = FLOW_POLICY | {"height": 16, "width": 16, "max_sequence_length": 8}
CASES |= {
    "flow_img2img": ("flow", {
        "policy": FLOW_POLICY | {"architecture": "sd3_img2img", "strength": 0.75},
        "data": {"train": SHAPES_EDIT},
        "algorithm": FLOW_ALGORITHM,
    }),
    "flow_kontext": ("flow", {
        "policy": TINY_FLOW_POLICY | {"model": TINY_PIPELINE + "flux_kontext", "architecture": "flux_kontext",
                                      "guidance_scale": 3.5},
        "data": {"train": SHAPES_EDIT},
        "algorithm": FLOW_ALGORITHM,
    }),
    "flow_i2v": ("flow", {
        "policy": TINY_FLOW_POLICY | {"model": TINY_PIPELINE + "wan_i2v", "architecture": "wan_i2v", "num_frames": 5,
                                      "guidance_scale": 2.0},
        "data": {"train": SHAPES_EDIT},
        "algorithm": FLOW_ALGORITHM,
    }),
    # Qwen-Image-Edit: the VL prompt encoder reads each row's source (24 tokens: the instruction, the tiny tokenizer's
    # template leftovers, plus the source's 4 vision tokens), two steps
    "flow_qwen_image_edit": ("flow", {
        "policy": TINY_FLOW_POLICY | {"model": TINY_PIPELINE + "qwen_image_edit", "architecture": "qwen_image_edit",
                                      "guidance_scale": 2.0, "num_steps": 2, "eval_num_steps": 2,
                                      "max_sequence_length": 24},
        "data": {"train": SHAPES_EDIT},
        "algorithm": FLOW_ALGORITHM,
    }),
    # FLUX.2 with a reference image: [dev] (embedded guidance, FLUX.2's system message takes about 40 tokens) and
    # [klein] (true CFG, the reference in both branches), two steps
    **{f"flow_{name}": ("flow", {
        "policy": TINY_FLOW_POLICY | {"model": TINY_PIPELINE + name, "architecture": name, "guidance_scale": 2.0,
                                      "num_steps": 2, "eval_num_steps": 2,
                                      "max_sequence_length": _SEQUENCE_LENGTH.get(name.removesuffix("_edit"), 8)},
        "data": {"train": SHAPES_EDIT},
        "algorithm": FLOW_ALGORITHM,
    }) for name in ("flux2_edit", "flux2_klein_edit")},
    # Wan2.2-TI2V-5B image-to-video: the source as latent frame 0 at timestep 0, 32 px (16 px per latent), two steps
    "flow_wan22_ti2v_i2v": ("flow", {
        "policy": VIDEO_POLICY | {"model": TINY_PIPELINE + "wan22_ti2v_i2v", "architecture": "wan22_ti2v_i2v",
                                  "height": 32, "width": 32, "num_steps": 2},
        "data": {"train": SHAPES_EDIT},
        "algorithm": FLOW_ALGORITHM,
    }),
    "flow_hunyuan_i2v": ("flow", {
        "policy": TINY_FLOW_POLICY | {"model": TINY_PIPELINE + "hunyuan_video15_i2v", "architecture": "auto",
                                      "num_frames": 5, "num_steps": 2, "guidance_scale": 2.0, "ema_decay": 0.0},
        "data": {"train": SHAPES_EDIT},
        "algorithm": FLOW_ALGORITHM,
    }),
}  # fmt: skip
#: the video and source-image flow cases run the flow policy's sharded code like flow_sde: left out of sharded training
ARCHITECTURE_CASES += ["flow_wan22", "flow_wan22_ti2v", "flow_hunyuan_video15", "flow_img2img", "flow_kontext",
                       "flow_i2v", "flow_hunyuan_i2v", "flow_qwen_image_edit", "flow_flux2_edit",
                       "flow_flux2_klein_edit", "flow_wan22_ti2v_i2v"]  # fmt: skip
