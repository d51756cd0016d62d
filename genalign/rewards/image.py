"""Rule-based image and video rewards, frame aggregation for videos, weighted sums, and rewards overlapped with sampling.

- ``jpeg_compressibility`` / ``jpeg_incompressibility``: minus / plus the JPEG size in kilobytes (DDPO);
- ``geneval_shapes``: the GenEval-style verifiable reward of the shapes world [319]: counts, colours and the spatial
  relation of the prompt checked against the shapes :func:`genalign.data.shapes.detect` finds in the image;
- ``video_frames``: any image reward applied to every frame of a video (``[F, H, W, 3]`` uint8), aggregated by mean or
  min over frames;
- ``weighted_sum``: several registered rewards combined with weights into one callable;
- :class:`AsyncRewards`: computes rewards in a thread pool so that scoring batch ``k`` overlaps sampling batch ``k+1``.

Images are ``PIL.Image`` in mode RGB or ``[H, W, 3]`` uint8 arrays; anything else raises a ValueError naming the reward,
the sample index and what was received (no silent conversion).
"""

from __future__ import annotations

import io
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Literal

import numpy as np
from PIL import Image

from genalign.data import shapes as shapes_world
from genalign.rewards.base import REWARDS, RewardFn, register_reward


def as_rgb_image(image: Any, *, reward: str, index: int) -> Image.Image:
    """Return ``image`` as an RGB ``PIL.Image``; raise a ValueError naming ``reward`` and sample ``index`` otherwise.

    Accepts RGB PIL images and ``[H, W, 3]`` uint8 arrays (numpy, or anything ``np.asarray`` turns into one).
    """
    if isinstance(image, Image.Image):
        if image.mode != "RGB":
            raise ValueError(
                f"reward {reward!r}: completion {index} is a PIL image in mode {image.mode!r}; expected mode 'RGB' "
                f"(convert with image.convert('RGB') if that is what you mean)"
            )
        return image
    array = np.asarray(image)
    if array.ndim != 3 or array.shape[-1] != 3 or array.dtype != np.uint8:
        raise ValueError(
            f"reward {reward!r}: completion {index} has shape {tuple(array.shape)} and dtype {array.dtype}; expected an "
            f"RGB PIL image or a [H, W, 3] uint8 array (a video [F, H, W, 3] needs the 'video_frames' wrapper)"
        )
    return Image.fromarray(array, mode="RGB")


def require_column(reward: str, name: str, columns: Mapping[str, Sequence[Any]], n: int) -> Sequence[Any]:
    """The dataset column ``name`` of length ``n``, or a ValueError naming the reward, the column and what exists."""
    if name not in columns:
        raise ValueError(
            f"reward {reward!r} needs the dataset column {name!r}, which this batch lacks (columns: "
            f"{sorted(columns)}); add it to the prompt rows (e.g. the 'shapes_t2i' task writes it)"
        )
    values = columns[name]
    if len(values) != n:
        raise ValueError(f"reward {reward!r}: column {name!r} has {len(values)} values for {n} completions")
    return values


# ---------------------------------------------------------------------------------------------------------------------
# JPEG compressibility (DDPO)


def jpeg_kilobytes(image: Image.Image, *, quality: int = 95) -> float:
    """Size of ``image`` saved as JPEG at ``quality``, in kilobytes (1000 bytes)."""
    buffer = io.BytesIO()
    image.save(buffer, format="JPEG", quality=quality)
    return buffer.tell() / 1000.0


@register_reward("jpeg_compressibility", source="DDPO")
def jpeg_compressibility(prompts: Sequence[str], completions: Sequence[Any], *, quality: int = 95, **_columns):
    """Minus the JPEG size in kB: higher for images that compress well (DDPO's compressibility task)."""
    return [
        -jpeg_kilobytes(as_rgb_image(c, reward="jpeg_compressibility", index=i), quality=quality)
        for i, c in enumerate(completions)
    ]


@register_reward("jpeg_incompressibility", source="DDPO")
def jpeg_incompressibility(prompts: Sequence[str], completions: Sequence[Any], *, quality: int = 95, **_columns):
    """The JPEG size in kB: higher for detailed images (DDPO's incompressibility task)."""
    return [
        jpeg_kilobytes(as_rgb_image(c, reward="jpeg_incompressibility", index=i), quality=quality)
        for i, c in enumerate(completions)
    ]


# ---------------------------------------------------------------------------------------------------------------------
# GenEval-style verifiable reward on the shapes world


def shapes_criteria(
    found: list[shapes_world.Shape], target: Mapping[str, Any], *, forbid_extra: bool, match_kind: bool = True
) -> list[bool]:
    """Pass/fail of each criterion of ``target`` (see :func:`genalign.data.shapes.parse_prompt`) on detected shapes.

    Criteria, in order: one per distinct target label (exactly the asked number of shapes with that label), then (if
    ``forbid_extra``) no other shapes, then (if the target has a relation) the relation between the subject and the
    object, each found exactly once. A label is ``(colour, kind)``, or the colour alone when ``match_kind`` is False
    (then a relation between two objects of one colour holds if it holds for either assignment of the two shapes).
    """

    def label(item: Any) -> tuple[str, ...]:
        color, kind = (item["color"], item["kind"]) if isinstance(item, Mapping) else (item.color, item.kind)
        return (color, kind) if match_kind else (color,)

    objects = target["objects"]
    wanted: dict[tuple[str, ...], int] = {}
    for o in objects:
        wanted[label(o)] = wanted.get(label(o), 0) + o["count"]
    labels = [label(s) for s in found]
    criteria = [labels.count(key) == count for key, count in wanted.items()]
    if forbid_extra:
        criteria.append(len(found) == sum(wanted.values()))
    relation = target.get("relation")
    if relation is not None:
        subject, obj = label(objects[relation["subject"]]), label(objects[relation["object"]])
        subjects = [s for s in found if label(s) == subject]
        objs = [s for s in found if label(s) == obj]
        if subject == obj:  # one colour, kinds ignored: either shape may be the subject
            holds = len(subjects) == 2 and any(
                shapes_world.relation_holds(a.center, b.center, relation["relation"])
                for a, b in (subjects, subjects[::-1])
            )
        else:
            holds = (
                len(subjects) == 1
                and len(objs) == 1
                and shapes_world.relation_holds(subjects[0].center, objs[0].center, relation["relation"])
            )
        criteria.append(holds)
    return criteria


@register_reward("geneval_shapes", source="[319] GenEval-style, shapes world")
class GenevalShapes:
    """GenEval-style verifiable reward for the shapes world: 1 when the image shows exactly what the prompt asks.

    Reads the dataset column ``target`` (written by ``shapes_t2i_rows``); with ``target_from_prompt=True`` it parses
    the prompt instead (:func:`genalign.data.shapes.parse_prompt`). Shapes are found with
    :func:`genalign.data.shapes.detect`.

    Args:
        partial_credit: return the fraction of criteria met (see :func:`shapes_criteria`) instead of all-or-nothing.
        forbid_extra: shapes not asked for make the image wrong (one criterion).
        match_kind: shapes must have the asked kind (circle / square / triangle); False checks colours, counts and
            relations only (GenEval's counting / colour / position categories without the object class).
        target_from_prompt: parse targets from the prompts when the batch has no ``target`` column.
        max_distance, min_area: passed to :func:`~genalign.data.shapes.detect`.
    """

    def __init__(
        self,
        *,
        partial_credit: bool = False,
        forbid_extra: bool = True,
        match_kind: bool = True,
        target_from_prompt: bool = False,
        max_distance: float = 120.0,
        min_area: float = 0.012,
    ) -> None:
        self.partial_credit = partial_credit
        self.forbid_extra = forbid_extra
        self.match_kind = match_kind
        self.target_from_prompt = target_from_prompt
        self.max_distance = max_distance
        self.min_area = min_area

    def __call__(self, prompts: Sequence[str], completions: Sequence[Any], **columns: Sequence[Any]) -> list[float]:
        if self.target_from_prompt and "target" not in columns:
            targets = [shapes_world.parse_prompt(p) for p in prompts]
        else:
            targets = require_column("geneval_shapes", "target", columns, len(completions))
        scores = []
        for index, (image, target) in enumerate(zip(completions, targets)):
            if not isinstance(target, Mapping) or "objects" not in target:
                raise ValueError(
                    f"reward 'geneval_shapes': target of sample {index} is {target!r}; expected a dict with 'objects' "
                    f"and 'relation' as written by genalign.data.shapes.parse_prompt"
                )
            rgb = as_rgb_image(image, reward="geneval_shapes", index=index)
            found = shapes_world.detect(rgb, max_distance=self.max_distance, min_area=self.min_area)
            criteria = shapes_criteria(found, target, forbid_extra=self.forbid_extra, match_kind=self.match_kind)
            scores.append(sum(criteria) / len(criteria) if self.partial_credit else float(all(criteria)))
        return scores


# ---------------------------------------------------------------------------------------------------------------------
# Videos: frame aggregation


def build_reward(name: str, args: Mapping[str, Any] | None = None) -> RewardFn:
    """Instantiate the registered reward ``name`` with ``args``."""
    return REWARDS.get(name)(**dict(args or {}))


@register_reward("video_frames", inner_rewards=({"name": "reward", "args": "args"},))
class VideoFrames:
    """Score a video with an image reward on each frame, aggregated over frames.

    Completions are ``[F, H, W, 3]`` uint8 arrays (or lists of frames). Every frame is scored with the per-sample
    columns of its video; a frame scored ``None`` is left out of the aggregate, a video whose frames are all ``None``
    scores ``None``.

    Args:
        reward: name of a registered image reward.
        args: its arguments.
        aggregate: ``"mean"`` or ``"min"`` over frames.
        every: score every ``every``-th frame (1 = all).
    """

    def __init__(
        self,
        *,
        reward: str,
        args: dict[str, Any] | None = None,
        aggregate: Literal["mean", "min"] = "mean",
        every: int = 1,
    ) -> None:
        if aggregate not in ("mean", "min"):
            raise ValueError(f"video_frames: aggregate={aggregate!r} must be 'mean' or 'min'")
        if every < 1:
            raise ValueError(f"video_frames: every={every} must be >= 1")
        self.reward_name = reward
        self.frame_reward = build_reward(reward, args)
        self.aggregate = aggregate
        self.every = every

    def __call__(self, prompts: Sequence[str], completions: Sequence[Any], **columns: Sequence[Any]) -> list:
        frame_prompts, frames, owner = [], [], []
        frame_columns: dict[str, list[Any]] = {k: [] for k in columns}
        for index, video in enumerate(completions):
            array = np.asarray(video)
            if array.ndim != 4 or array.shape[-1] != 3 or array.dtype != np.uint8:
                raise ValueError(
                    f"reward 'video_frames' ({self.reward_name}): completion {index} has shape {tuple(array.shape)} "
                    f"and dtype {array.dtype}; expected a video as a [F, H, W, 3] uint8 array"
                )
            for frame in array[:: self.every]:
                frames.append(frame)
                frame_prompts.append(prompts[index])
                owner.append(index)
                for key, values in columns.items():
                    frame_columns[key].append(values[index])
        frame_scores = self.frame_reward(frame_prompts, frames, **frame_columns)
        per_video: list[list[float]] = [[] for _ in completions]
        for index, score in zip(owner, frame_scores):
            if score is not None:
                per_video[index].append(float(score))
        reduce = np.mean if self.aggregate == "mean" else np.min
        return [float(reduce(scores)) if scores else None for scores in per_video]


# ---------------------------------------------------------------------------------------------------------------------
# Several rewards with weights, and rewards overlapped with sampling


@register_reward("weighted_sum", inner_rewards=({"by_name": "rewards"},))
class WeightedSum:
    """``sum_k w_k r_k`` over several registered rewards; ``None`` from any reward makes the sample ``None``.

    Args:
        rewards: ``{name: {"weight": float, "args": {...}}}``.
    """

    def __init__(self, *, rewards: dict[str, Any]) -> None:
        if not rewards:
            raise ValueError("weighted_sum: rewards={} is empty; give at least one {name: {weight, args}}")
        self.parts: list[tuple[str, float, RewardFn]] = []
        for name, spec in rewards.items():
            spec = dict(spec or {})
            unknown = set(spec) - {"weight", "args"}
            if unknown:
                raise ValueError(f"weighted_sum: reward {name!r} has unknown keys {sorted(unknown)}; use weight, args")
            self.parts.append((name, float(spec.get("weight", 1.0)), build_reward(name, spec.get("args"))))

    def __call__(self, prompts: Sequence[str], completions: Sequence[Any], **columns: Sequence[Any]) -> list:
        total: list[float | None] = [0.0] * len(completions)
        for _name, weight, fn in self.parts:
            for i, score in enumerate(fn(prompts, completions, **columns)):
                total[i] = None if score is None or total[i] is None else total[i] + weight * float(score)
        return total


class AsyncRewards:
    """Compute several rewards in background threads so that scoring overlaps the next rollout.

    Image rewards spend their time in PIL, numpy and torch kernels that release the GIL, so threads overlap them
    with sampling. Usage::

        pool = AsyncRewards({"geneval": geneval_fn, "jpeg": jpeg_fn}, max_workers=2)
        pending = pool.submit(prompts, images, **columns)   # returns at once
        ...                                                 # sample the next batch
        scores = pending.result()                           # {"geneval": [N], "jpeg": [N]}

    Args:
        reward_fns: name -> reward callable.
        max_workers: threads; each submitted batch runs its rewards one after the other in one thread.
    """

    def __init__(self, reward_fns: Mapping[str, Callable[..., list]], *, max_workers: int = 1) -> None:
        if max_workers < 1:
            raise ValueError(f"AsyncRewards: max_workers={max_workers} must be >= 1")
        self.reward_fns = dict(reward_fns)
        self._pool = ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="genalign-reward")

    def _score(self, prompts: Sequence[str], completions: Sequence[Any], columns: dict[str, Sequence[Any]]) -> dict:
        out = {}
        for name, fn in self.reward_fns.items():
            scores = list(fn(prompts, completions, **columns))
            if len(scores) != len(completions):
                raise ValueError(f"reward {name!r} returned {len(scores)} scores for {len(completions)} completions")
            out[name] = scores
        return out

    def submit(self, prompts: Sequence[str], completions: Sequence[Any], **columns: Sequence[Any]) -> Future:
        """Start scoring a batch; the future's result is ``{name: list[float | None]}`` (``[N]`` each)."""
        return self._pool.submit(self._score, list(prompts), list(completions), dict(columns))

    def close(self) -> None:
        self._pool.shutdown(wait=True)

    def __enter__(self) -> AsyncRewards:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
