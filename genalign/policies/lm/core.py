"""The token-LM core shared by the causal-LM, VLM and masked-diffusion-LM families.

What every token-LM family has in common lives here once:

* configuration pieces: the weight :data:`DTYPES` (defined in :mod:`genalign.policies.base`), :class:`LoRAConfig`
  (defined in :mod:`genalign.policies.lora`, shared with the flow family) and the reference it implies (:func:`lora_reference_mode`), the
  attention kernel (:data:`AttnImplementation`), the declared capabilities (:func:`token_capabilities`) and the
  sampler settings of autoregressive families (:func:`sampling_params`);
* model plumbing: the end and pad tokens (:func:`end_and_pad_token_ids`), the eval-mode context (:func:`eval_mode`);
* :class:`TokenLMPolicy`, the base class of the three families: the KL to the reference policy
  (:class:`~genalign.policies.lm.reference.ReferencePolicy`) around the family's own scoring pass, the trainable
  parameters, saving the weights (LoRA adapters alone in peft format, or all weights as safetensors plus the model
  config) together with the tokenizer or processor, the generation config and a model card
  (:mod:`genalign.policies.lm.export`), the resumable state: every random generator of the family (contract 4 of
  ``shared/ARCHITECTURE.md``), and the host of a teacher (:class:`~genalign.policies.base.TeacherHost`,
  :mod:`genalign.teachers`): a teacher's model scored through the family's own pass, the reference and the current
  weights as self-teachers.

A family implements ``rollout``, :meth:`TokenLMPolicy.score_actions` (its scoring pass under a given module, without
the KL) and :meth:`TokenLMPolicy.checkpoint_facts` (what its model card says); it never writes the reference,
checkpoint or parameter plumbing again.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Literal, Protocol

import torch
from torch import Tensor, nn

from genalign.algorithms import kl_penalty
from genalign.algorithms.scores import ScoreOutput, ScoreRequest
from genalign.algorithms.structure import PrefixTree, token_prefix_tree
from genalign.policies.base import DTYPES, PeerModel, Policy, Rollout, RolloutRequest, TeacherHost
from genalign.policies.capabilities import REFERENCE_FEATURES
from genalign.policies.lm.engines.base import SamplingParams
from genalign.policies.lm.export import CheckpointFacts, write_checkpoint_extras
from genalign.policies.lm.logprobs import REFERENCE_TERMS, OtherModel, forward_kl_term
from genalign.policies.lm.lora import load_weights, save_weights
from genalign.policies.lm.options import (
    AUTOREGRESSIVE_FEATURES,
    AUTOREGRESSIVE_STRUCTURE,
    REFERENCE_ENTROPY,
    AttnImplementation,
    lora_reference_mode,
    token_capabilities,
)
from genalign.policies.lm.reference import ReferencePolicy, anchor_reference, get_base_model
from genalign.policies.lm.segments import SegmentBoundaries
from genalign.policies.lora import LoRAConfig


def attention_kwargs(attn_implementation: str | None) -> dict[str, str]:
    """``from_pretrained`` keyword arguments for ``attn_implementation`` (none for ``None``: transformers' default)."""
    return {} if attn_implementation is None else {"attn_implementation": attn_implementation}


class AutoregressiveSampling(Protocol):
    """The sampler fields of an autoregressive family's config."""

    max_new_tokens: int
    temperature: float
    eval_temperature: float
    top_p: float
    top_k: int
    stop: list[str]


def sampling_params(
    config: AutoregressiveSampling,
    mode: Literal["train", "eval"],
    *,
    eos_token_ids: tuple[int, ...],
    pad_token_id: int,
) -> SamplingParams:
    """The rollout engine's settings for ``mode`` (``eval_temperature`` in evaluation, the rest shared)."""
    return SamplingParams(
        max_new_tokens=config.max_new_tokens,
        temperature=config.temperature if mode == "train" else config.eval_temperature,
        top_p=config.top_p,
        top_k=config.top_k,
        eos_token_ids=eos_token_ids,
        pad_token_id=pad_token_id,
        stop=tuple(config.stop),
    )


def end_and_pad_token_ids(tokenizer, generation_config: Any, *, model_name: str) -> tuple[tuple[int, ...], int]:
    """``(eos_token_ids, pad_token_id)``: the sorted union of the tokenizer's end token and the generation config's
    end tokens, and the tokenizer's pad token (the first end token when it has none)."""
    declared = generation_config.eos_token_id if generation_config is not None else None
    declared = list(declared) if isinstance(declared, list | tuple) else [declared]
    eos = sorted({int(i) for i in (tokenizer.eos_token_id, *declared) if i is not None})
    if not eos:
        raise ValueError(
            f"{model_name!r} defines no end-of-sequence token; set tokenizer.eos_token or generation_config.eos_token_id."
        )
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos[0]
    return tuple(eos), int(pad)


def completion_structure(
    request: RolloutRequest,
    segments: SegmentBoundaries,
    truncated: Tensor,
    completion_ids: Tensor,
    mask: Tensor,
    group_ids: Tensor | None = None,
    sampling_tree: PrefixTree | None = None,
) -> dict[str, Any]:
    """The structure of autoregressive completions: ``truncated`` ``[N]`` bool always (the engines report it),
    ``segment_ids`` ``[N, T]`` long (:mod:`genalign.policies.lm.segments`), ``action_ids`` ``[N, T]`` long (the
    completion token ids, 0 on padding) and ``prefix_tree`` (``sampling_tree``, the tree a tree rollout sampled, when
    given; else the token prefix tree of each group, :func:`~genalign.algorithms.structure.token_prefix_tree`; needs
    ``group_ids`` ``[N]``) when ``request`` names them."""
    wanted = request.structure
    tree = None
    if "prefix_tree" in wanted and sampling_tree is not None:
        tree = sampling_tree
    elif "prefix_tree" in wanted:
        if group_ids is None:
            raise ValueError("completion_structure: the prefix tree of the groups needs group_ids [N]")
        tree = token_prefix_tree(completion_ids, mask, group_ids)
    structure: dict[str, Any] = {"truncated": truncated, "prefix_tree": tree}
    if "segment_ids" in wanted:
        structure["segment_ids"] = segments(completion_ids, mask)
    if "action_ids" in wanted:
        structure["action_ids"] = torch.where(mask > 0, completion_ids, 0).long()
    return {name: value for name, value in structure.items() if value is not None}


@contextmanager
def eval_mode(module: nn.Module) -> Iterator[None]:
    """``module`` in eval mode (no dropout while sampling), its previous mode restored afterwards."""
    was_training = module.training
    module.eval()
    try:
        yield
    finally:
        module.train(was_training)


def empty_rollout(counts: dict[str, int]) -> Rollout:
    """A rollout of zero samples (every prompt of the call was skipped), with the call's counters."""
    empty = torch.zeros(0, 0)
    return Rollout(
        rows=[],
        outputs=[],
        group_ids=torch.zeros(0, dtype=torch.long),
        old_logp=empty,
        action_mask=empty,
        counts=counts,
    )


def peer_model(module: nn.Module, tokenizer: Any) -> PeerModel:
    """``module`` frozen in eval mode, with its tokenizer's vocabulary and its output head's size (a teacher)."""
    module = module.eval().requires_grad_(False)
    head = get_base_model(module).get_output_embeddings()
    return PeerModel(module, dict(tokenizer.get_vocab()), int(head.weight.shape[0]))


@dataclass(frozen=True)
class TrainedModule:
    """A module the optimizer trains, as data: the module, how its weights are written to and read from a checkpoint
    folder, and whether it is the policy's model (then its frozen reference copy is sharded like it, and the folder
    gets the model card and generation config that load it without genalign)."""

    module: nn.Module
    save: Callable[[Path], None]
    load: Callable[[Path], None]
    is_model: bool = False


def reference_head(module: nn.Module) -> nn.Module:
    """The output head of the reference ``module`` for the forward KL (:meth:`TokenLMPolicy.score`), applied later,
    in the policy's pass: refused when it carries LoRA layers (outside the reference context the adapters would be
    on again; put LoRA on the backbone only, or use ``policy.reference: frozen_copy``)."""
    from genalign.policies.lm.logprobs import output_head

    head = output_head(module)
    if any(hasattr(part, "lora_A") for part in head.modules()):
        raise ValueError(
            "ref_forward_kl: the output head carries LoRA layers, so the reference's head is not a separate module; "
            "leave lm_head out of policy.lora target modules or set policy.reference: frozen_copy."
        )
    return head


class TokenLMPolicy(Policy):
    """Base class of the token-LM families: KL, parameters, checkpoints and resumable state (module docstring).

    Args:
        config: the family's config (it declares ``capabilities()`` and holds ``seed``).
        model: the model the optimizer trains (a peft model when LoRA is on).
        preprocessor: the tokenizer, or a VLM's processor; saved with the weights.
        device: where the model lives.
        reference: the KL's reference policy.
        generator: the sampler's random generator (seeded by the family).

    Subclasses add generators to :meth:`random_generators` and other mutable state to :meth:`state_dict`.
    """

    #: Why a score feature outside the capabilities is missing, by feature name (completes the error message).
    missing_feature_reasons: ClassVar[dict[str, str]] = {
        "kl": "has no reference policy with policy.reference='none'; set it to 'auto' or drop the KL term",
        "ref_logp": "has no reference policy with policy.reference='none'; set it to 'auto' or choose an objective "
        "without a reference",
    }

    def __init__(
        self,
        config: Any,
        model: nn.Module,
        *,
        preprocessor: Any,
        device: torch.device,
        reference: ReferencePolicy,
        generator: torch.Generator,
    ) -> None:
        self.config = config
        self.capabilities = config.capabilities()
        self.model = model
        #: The transformers model itself (with LoRA, peft's adapter layers are injected inside it, so they apply).
        self.hf_model = get_base_model(model)
        self.preprocessor = preprocessor
        self.device = device
        self.reference = reference
        self.generator = generator

    # ---- scoring -------------------------------------------------------------------------------------------------
    @abstractmethod
    def score_actions(self, module: nn.Module, rollout: Rollout, request: ScoreRequest) -> ScoreOutput:
        """The family's scoring pass of ``rollout`` under ``module`` (the policy's model, or the reference's): ``logp``
        ``[n, T]`` and the requested features other than ``kl``."""

    def score(self, rollout: Rollout, request: ScoreRequest = ScoreRequest()) -> ScoreOutput:
        """``score_actions`` under the current weights, plus, from one reference pass, the per-action KL ``[n, T]`` to
        the reference when the request names ``kl`` (its parameter is the estimator), the reference's log-probs
        ``ref_logp`` ``[n, T]`` and its own per-action entropy ``ref_entropy`` ``[n, T]`` when it names them (the
        reference scores the same actions through the same code path). ``ref_forward_kl`` (the per-token forward KL
        ``KL(π_ref ‖ πθ)`` over the vocabulary, with gradient) and ``ref_vocab_term`` (a regulariser's term of both
        distributions, its parameter) run the reference pass first, for its hidden states and head, and the policy's
        chunked head pass then compares both distributions chunk by chunk."""
        self.check_request(request)
        reference_pass = None
        against = {name: request.param(name, forward_kl_term) for name in REFERENCE_TERMS if name in request}
        if against:
            extra = ("entropy",) if "ref_entropy" in request else ()
            reference_pass = self.reference(
                lambda module: (self.score_actions(module, rollout, ScoreRequest.of("hidden", *extra)),
                                reference_head(module))
            )  # fmt: skip
            side = OtherModel(reference_pass[0]["hidden"], reference_pass[1], against)
            request = request.union(ScoreRequest.of(**dict.fromkeys(against, side)))  # each term carries the side
        out = self.score_actions(self.model, rollout, request)
        if not (REFERENCE_FEATURES | REFERENCE_ENTROPY) & request.features:
            return out
        mask = rollout.action_mask.to(out.logp.device)
        features = {}
        if reference_pass is not None:
            ref = reference_pass[0]
            ref_logp = ref.logp.to(out.logp.device)  # [n, T]
            if "ref_entropy" in request:
                features["ref_entropy"] = ref["entropy"].float() * mask  # [n, T]
        elif "ref_entropy" in request:
            ref = self.reference(lambda module: self.score_actions(module, rollout, ScoreRequest.of("entropy")))
            ref_logp, features["ref_entropy"] = ref.logp.to(out.logp.device), ref["entropy"].float() * mask  # [n, T]
        else:
            ref_logp = self.reference_logprobs(rollout).to(out.logp.device)  # [n, T]
        if "ref_logp" in request:
            features["ref_logp"] = ref_logp.float().detach()
        if "kl" in request:
            features["kl"] = kl_penalty(out.logp, ref_logp, request.param("kl", "k3")) * mask
        return out.with_features(**features)

    def anchor_reference(self, weights: dict[str, Tensor]) -> None:
        anchor_reference(self.reference, weights)

    def reference_logprobs(self, rollout: Rollout) -> Tensor:
        """``[n, T]`` log-probs of the stored actions under the reference policy (loaded on first use)."""
        return self.reference(lambda module: self.score_actions(module, rollout, ScoreRequest()).logp)

    def check_request(self, request: ScoreRequest) -> None:
        """Raise a ``ValueError`` naming the first requested feature these options cannot compute."""
        missing = sorted(request.features - self.capabilities.signals)
        if missing:
            reason = self.missing_feature_reasons.get(missing[0], "does not compute it")
            raise ValueError(
                f"score feature {missing[0]!r} was requested from the {self.family} policy, which {reason}."
            )

    # ---- teachers (TeacherHost: genalign.teachers) ------------------------------------------------------------------
    def teacher_host(self) -> TeacherHost:
        """The policy itself: it scores a teacher's model through its own chunked head pass (:meth:`score_with`) and
        runs its reference and current weights as a self-teacher; ``load_peer`` and ``with_prompts`` are the
        family's (only the kinds in ``capabilities.teachers`` are called)."""
        if not self.capabilities.teachers:
            return super().teacher_host()
        return self

    def score_with(self, module: nn.Module, rollout: Rollout, request: ScoreRequest) -> ScoreOutput:
        """:meth:`score_actions` under ``module`` without gradient (a teacher's model scored exactly like the policy
        and its reference)."""
        with torch.no_grad():
            return self.score_actions(module, rollout, request)

    def under_reference(self, fn: Callable[[nn.Module], Any]) -> Any:
        return self.reference(fn)

    def under_current_weights(self, fn: Callable[[nn.Module], Any]) -> Any:
        with torch.no_grad(), eval_mode(self.model):
            return fn(self.model)

    def vocabulary(self) -> dict[str, int]:
        tokenizer = getattr(self.preprocessor, "tokenizer", self.preprocessor)  # a VLM's processor holds one
        return dict(tokenizer.get_vocab())

    # ---- parameters and weights ----------------------------------------------------------------------------------
    def trained_modules(self) -> list[TrainedModule]:
        """What the optimizer trains, as data (a family with other trained parts, e.g. the diffusion LM's decoding
        policy, lists them here): by default the model, saved as LoRA adapters alone (peft format) or all weights
        (``model.safetensors`` + config)."""
        model = self.model
        return [TrainedModule(model, lambda d: save_weights(model, d), lambda d: load_weights(model, d), True)]

    def trainable_parameters(self) -> list[nn.Parameter]:
        return [p for part in self.trained_modules() for p in part.module.parameters() if p.requires_grad]

    def modules_to_train(self) -> list[nn.Module]:
        return [part.module for part in self.trained_modules()]

    def prepare_sharding(self, wrap: Callable[[nn.Module], None]) -> None:
        """Every trained module, and the model's frozen reference copy when it is loaded (on the first KL request, in
        every process at the same micro-batch)."""
        for part in self.trained_modules():
            wrap(part.module)
            if part.is_model:
                self.reference.prepare_frozen = wrap

    def save(self, directory: Path) -> None:
        """Every trained module's weights, the tokenizer or processor as it was loaded, and (when the model is
        trained) the generation config genalign samples with (autoregressive families) and a model card
        (``README.md``), so the folder loads without genalign (:mod:`genalign.policies.lm.export`)."""
        directory = Path(directory)
        parts = self.trained_modules()
        for part in parts:
            part.save(directory)
        self.preprocessor.save_pretrained(str(directory))
        if any(part.is_model for part in parts):
            write_checkpoint_extras(directory, self.checkpoint_facts(), self.generation_config())

    @abstractmethod
    def checkpoint_facts(self) -> CheckpointFacts:
        """What the model card of a saved folder says: base model, family, the auto class that loads it, LoRA."""

    def generation_config(self) -> Any | None:
        """The transformers ``GenerationConfig`` saved with the weights (end, pad tokens and length the policy samples
        with), or None for a family that does not sample through ``generate``."""
        return None

    def load(self, directory: Path) -> None:
        for part in self.trained_modules():
            part.load(Path(directory))

    # ---- resumable state -----------------------------------------------------------------------------------------
    def random_generators(self) -> dict[str, torch.Generator]:
        """Every random generator the family draws from, by state-dict key."""
        return {"generator": self.generator}

    def state_dict(self) -> dict[str, Any]:
        """The state of every random generator (``uint8`` tensors), so a resumed run samples what the killed one
        would have sampled."""
        return {name: generator.get_state() for name, generator in self.random_generators().items()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        generators = self.random_generators()
        if set(state) != set(generators):
            raise ValueError(
                f"the {self.family} policy state holds {sorted(state)} but this policy needs {sorted(generators)}; "
                "was the checkpoint written by another policy family or version?"
            )
        for name, generator in generators.items():
            generator.set_state(state[name])


__all__ = [
    "AUTOREGRESSIVE_FEATURES",
    "AUTOREGRESSIVE_STRUCTURE",
    "DTYPES",
    "AttnImplementation",
    "CheckpointFacts",
    "LoRAConfig",
    "TokenLMPolicy",
    "attention_kwargs",
    "completion_structure",
    "empty_rollout",
    "end_and_pad_token_ids",
    "eval_mode",
    "lora_reference_mode",
    "peer_model",
    "sampling_params",
    "token_capabilities",
]
