"""A synthetic world of coloured shapes: sample scenes, render them, describe them, and find them again in images.

The world backs the text-to-image demo (prompts such as ``"two red circles"`` or ``"a blue square left of a green
triangle"``, scored by a GenEval-style verifiable reward [319]) and visual question answering tasks ("how many red
circles?", "give the box of the blue square").

Everything is programmatic and deterministic given a ``numpy.random.Generator``:

- :func:`sample_scene` draws a :class:`Scene` (non-overlapping shapes on a square canvas, optionally with one spatial
  relation between two of them);
- :func:`render` draws a scene as a ``PIL.Image`` (RGB, white background, flat colours, no anti-aliasing);
- :func:`describe` turns a scene into its prompt, :func:`parse_prompt` turns a prompt back into a structured target;
- :func:`detect` finds shapes in any RGB image by colour segmentation, connected components and shape classification
  (exact on rendered scenes, tolerant to the blur and colour drift of generated images);
- :func:`shapes_t2i_rows` yields prompt rows carrying the structured ``target`` the reward checks.

Boxes are ``(x0, y0, x1, y1)`` in pixels of the canvas, ``x1``/``y1`` exclusive, origin at the top-left corner.
"""

from __future__ import annotations

import hashlib
import re
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
from PIL import Image, ImageDraw

ShapeKind = Literal["circle", "square", "triangle"]
Relation = Literal["left of", "right of", "above", "below"]
Template = Literal["count", "pair", "relation"]

KINDS: tuple[str, ...] = ("circle", "square", "triangle")
#: colour name -> RGB; far apart from each other and from the white background.
PALETTE: dict[str, tuple[int, int, int]] = {
    "red": (220, 30, 30),
    "green": (30, 160, 50),
    "blue": (30, 70, 220),
    "yellow": (235, 200, 20),
}
BACKGROUND: tuple[int, int, int] = (255, 255, 255)
RELATIONS: tuple[str, ...] = ("left of", "right of", "above", "below")
TEMPLATES: tuple[str, ...] = ("count", "pair", "relation")
NUMBER_WORDS: dict[int, str] = {1: "a", 2: "two", 3: "three"}
_WORD_NUMBERS: dict[str, int] = {"a": 1, "an": 1, "one": 1, "two": 2, "three": 3}


@dataclass(frozen=True)
class Shape:
    """One flat-coloured shape.

    Args:
        kind: ``"circle"``, ``"square"`` or ``"triangle"`` (an upward-pointing isosceles triangle).
        color: a name from :data:`PALETTE`.
        box: ``(x0, y0, x1, y1)`` in pixels, ``x1``/``y1`` exclusive.
    """

    kind: str
    color: str
    box: tuple[int, int, int, int]

    @property
    def center(self) -> tuple[float, float]:
        """``(x, y)`` centre of the box in pixels."""
        x0, y0, x1, y1 = self.box
        return ((x0 + x1) / 2.0, (y0 + y1) / 2.0)

    @property
    def label(self) -> str:
        """``"red circle"``."""
        return f"{self.color} {self.kind}"


@dataclass(frozen=True)
class Scene:
    """Shapes on a square ``size`` x ``size`` canvas.

    ``relation`` is ``(subject index, relation, object index)`` into ``shapes`` when the scene illustrates one spatial
    relation ("a red circle left of a blue square"); it is ``None`` for scenes described by counts only.
    """

    size: int
    shapes: tuple[Shape, ...]
    relation: tuple[int, str, int] | None = None
    meta: dict[str, Any] = field(default_factory=dict, compare=False)


def relation_holds(subject: tuple[float, float], obj: tuple[float, float], relation: str) -> bool:
    """Whether ``subject`` centre is ``relation`` ``obj`` centre: displaced the right way along the dominant axis.

    "left of" means ``dx = x_obj - x_subj > 0`` and ``dx >= |dy|``; the other relations are analogous (image y grows
    downwards, so "above" means a smaller y).
    """
    dx = obj[0] - subject[0]
    dy = obj[1] - subject[1]
    if relation == "left of":
        return dx > 0 and dx >= abs(dy)
    if relation == "right of":
        return dx < 0 and -dx >= abs(dy)
    if relation == "above":
        return dy > 0 and dy >= abs(dx)
    if relation == "below":
        return dy < 0 and -dy >= abs(dx)
    raise ValueError(f"relation={relation!r} is not one of {RELATIONS}")


def _check_choices(name: str, values: tuple[str, ...] | list[str], allowed: tuple[str, ...]) -> tuple[str, ...]:
    values = tuple(values)
    bad = [v for v in values if v not in allowed]
    if not values or bad:
        raise ValueError(f"{name}={values!r} must be a non-empty subset of {allowed}; bad values: {bad}")
    return values


def _place(
    rng: np.random.Generator, size: int, sides: list[int], placed: list[tuple[int, int, int, int]], gap: int
) -> list[tuple[int, int, int, int]] | None:
    """Random non-overlapping square boxes for ``sides`` (keeping ``gap`` pixels apart), or None after many tries."""
    boxes = list(placed)
    for side in sides:
        for _ in range(200):
            x0 = int(rng.integers(0, size - side + 1))
            y0 = int(rng.integers(0, size - side + 1))
            box = (x0, y0, x0 + side, y0 + side)
            if all(
                box[0] >= b[2] + gap or b[0] >= box[2] + gap or box[1] >= b[3] + gap or b[1] >= box[3] + gap
                for b in boxes
            ):
                boxes.append(box)
                break
        else:
            return None
    return boxes[len(placed) :]


def sample_scene(
    rng: np.random.Generator,
    *,
    size: int = 32,
    template: Template | None = None,
    colors: tuple[str, ...] | list[str] = tuple(PALETTE),
    kinds: tuple[str, ...] | list[str] = KINDS,
    max_count: int = 3,
    min_side: float = 0.28,
    max_side: float = 0.4,
    gap: int = 1,
) -> Scene:
    """Draw a random scene.

    Templates (chosen uniformly when ``template`` is None):

    - ``"count"``: 1..``max_count`` shapes of one colour and kind ("two red circles");
    - ``"pair"``: one shape each of two different (colour, kind) labels ("a red circle and a blue square");
    - ``"relation"``: like ``"pair"`` plus a spatial relation ("a red circle left of a blue square").

    Args:
        rng: source of randomness (the scene is a pure function of its state).
        size: canvas side in pixels.
        min_side, max_side: shape side as a fraction of ``size``.
        gap: minimal free pixels between two shapes.
    """
    colors = _check_choices("colors", colors, tuple(PALETTE))
    kinds = _check_choices("kinds", kinds, KINDS)
    if not 1 <= max_count <= max(NUMBER_WORDS):
        raise ValueError(f"max_count={max_count} must be in 1..{max(NUMBER_WORDS)}")
    if not 0 < min_side <= max_side < 0.5:
        raise ValueError(f"need 0 < min_side <= max_side < 0.5, got min_side={min_side}, max_side={max_side}")
    if size < 16:
        raise ValueError(f"size={size} is too small to draw shapes; use size >= 16")
    if template is None:
        template = TEMPLATES[int(rng.integers(len(TEMPLATES)))]
    elif template not in TEMPLATES:
        raise ValueError(f"template={template!r} is not one of {TEMPLATES}")
    lo, hi = max(5, round(min_side * size)), max(5, round(max_side * size))

    labels = [(c, k) for c in colors for k in kinds]
    if template == "count":
        color, kind = labels[int(rng.integers(len(labels)))]
        count = int(rng.integers(1, max_count + 1))
        chosen = [(color, kind)] * count
    else:
        if len(labels) < 2:
            raise ValueError(f"template={template!r} needs two different (colour, kind) labels; widen colors/kinds")
        i, j = rng.choice(len(labels), size=2, replace=False)
        chosen = [labels[int(i)], labels[int(j)]]
    relation = RELATIONS[int(rng.integers(len(RELATIONS)))] if template == "relation" else None

    for _ in range(100):
        sides = [int(rng.integers(lo, hi + 1)) for _ in chosen]
        boxes = _place(rng, size, sides, [], gap)
        if boxes is None:
            continue
        shapes = tuple(Shape(kind, color, box) for (color, kind), box in zip(chosen, boxes))
        if relation is not None and not relation_holds(shapes[0].center, shapes[1].center, relation):
            continue
        return Scene(size=size, shapes=shapes, relation=(0, relation, 1) if relation else None)
    raise RuntimeError(f"could not place {len(chosen)} shapes on a {size}px canvas; lower max_side={max_side}")


def render(scene: Scene, size: int | None = None) -> Image.Image:
    """Draw ``scene`` as an RGB image of ``size`` x ``size`` pixels (default: the scene's own size)."""
    size = scene.size if size is None else size
    scale = size / scene.size
    image = Image.new("RGB", (size, size), BACKGROUND)
    draw = ImageDraw.Draw(image)
    for shape in scene.shapes:
        x0, y0, x1, y1 = (round(v * scale) for v in shape.box)
        rgb = PALETTE[shape.color]
        if shape.kind == "circle":
            draw.ellipse([x0, y0, x1 - 1, y1 - 1], fill=rgb)
        elif shape.kind == "square":
            draw.rectangle([x0, y0, x1 - 1, y1 - 1], fill=rgb)
        elif shape.kind == "triangle":
            draw.polygon([(x0, y1 - 1), (x1 - 1, y1 - 1), ((x0 + x1 - 1) / 2.0, y0)], fill=rgb)
        else:
            raise ValueError(f"shape kind {shape.kind!r} is not one of {KINDS}")
    return image


def _phrase(color: str, kind: str, count: int) -> str:
    return f"{NUMBER_WORDS[count]} {color} {kind}{'s' if count > 1 else ''}"


def describe(scene: Scene) -> str:
    """The prompt of a scene: ``"two red circles"``, ``"a red circle and a blue square"``,
    ``"a red circle left of a blue square"``."""
    if scene.relation is not None:
        i, relation, j = scene.relation
        a, b = scene.shapes[i], scene.shapes[j]
        return f"{_phrase(a.color, a.kind, 1)} {relation} {_phrase(b.color, b.kind, 1)}"
    counts: dict[tuple[str, str], int] = {}
    for shape in scene.shapes:
        counts[(shape.color, shape.kind)] = counts.get((shape.color, shape.kind), 0) + 1
    return " and ".join(_phrase(color, kind, n) for (color, kind), n in counts.items())


def scene_target(scene: Scene) -> dict[str, Any]:
    """The structured target of a scene's prompt (see :func:`parse_prompt`)."""
    return parse_prompt(describe(scene))


_PHRASE_RE = r"(a|an|one|two|three) (\w+) (circle|square|triangle)s?"


def parse_prompt(prompt: str) -> dict[str, Any]:
    """Structured target of a shapes prompt.

    Returns ``{"objects": [{"color", "kind", "count"}, ...], "relation": None | {"subject": i, "relation": r,
    "object": j}}`` where ``i``/``j`` index ``objects``. Raises ValueError for text outside the grammar.
    """
    text = prompt.strip().lower().rstrip(".")
    rel = re.fullmatch(rf"{_PHRASE_RE} ({'|'.join(RELATIONS)}) {_PHRASE_RE}", text)
    if rel is not None:
        g = rel.groups()
        parts, relation = [g[0:3], g[4:7]], g[3]
    else:
        parts = []
        for chunk in text.split(" and "):
            m = re.fullmatch(_PHRASE_RE, chunk)
            if m is None:
                parts = []
                break
            parts.append(m.groups())
        relation = None
    objects = []
    for number, color, kind in parts:
        if color not in PALETTE:
            parts = []
            break
        objects.append({"color": color, "kind": kind, "count": _WORD_NUMBERS[number]})
    if not parts:
        raise ValueError(
            f"prompt {prompt!r} is not in the shapes grammar (e.g. 'two red circles', 'a red circle and a blue square', "
            f"'a red circle left of a blue square'; colours {tuple(PALETTE)}, kinds {KINDS})"
        )
    if relation is not None:
        if objects[0]["count"] != 1 or objects[1]["count"] != 1:
            raise ValueError(f"prompt {prompt!r}: a spatial relation needs single objects ('a ... left of a ...')")
        return {"objects": objects, "relation": {"subject": 0, "relation": relation, "object": 1}}
    return {"objects": objects, "relation": None}


# ---------------------------------------------------------------------------------------------------------------------
# Detection


def _segment_colors(pixels: np.ndarray, max_distance: float) -> np.ndarray:
    """Per-pixel colour index into PALETTE order, or -1 for background / unclear.

    Args:
        pixels: ``[H, W, 3]`` uint8 or float in 0..255.
    Returns:
        ``[H, W]`` int array.
    """
    refs = np.asarray([BACKGROUND, *PALETTE.values()], dtype=np.float32)  # [1 + C, 3]
    dist = np.linalg.norm(pixels.astype(np.float32)[:, :, None, :] - refs[None, None], axis=-1)  # [H, W, 1 + C]
    nearest = dist.argmin(-1)  # [H, W]
    labels = nearest - 1  # background -> -1
    labels[dist.min(-1) > max_distance] = -1
    return labels


def _components(mask: np.ndarray) -> list[np.ndarray]:
    """4-connected components of a boolean ``[H, W]`` mask, each as an ``[n, 2]`` array of (y, x)."""
    seen = np.zeros_like(mask, dtype=bool)
    height, width = mask.shape
    out = []
    for y0, x0 in zip(*np.nonzero(mask)):
        if seen[y0, x0]:
            continue
        seen[y0, x0] = True
        queue = deque([(int(y0), int(x0))])
        members = []
        while queue:
            y, x = queue.popleft()
            members.append((y, x))
            for ny, nx in ((y - 1, x), (y + 1, x), (y, x - 1), (y, x + 1)):
                if 0 <= ny < height and 0 <= nx < width and mask[ny, nx] and not seen[ny, nx]:
                    seen[ny, nx] = True
                    queue.append((ny, nx))
        out.append(np.asarray(members))
    return out


def classify_blob(points: np.ndarray) -> str:
    """Shape kind of one blob given its pixels ``[n, 2]`` (y, x).

    An upward triangle is much narrower in its top quarter than in its bottom quarter; a square fills its box
    (fill ratio 1), a circle fills about pi/4 of it.
    """
    ys, xs = points[:, 0], points[:, 1]
    y0, y1, x0, x1 = ys.min(), ys.max() + 1, xs.min(), xs.max() + 1
    height, width = y1 - y0, x1 - x0
    fill = len(points) / float(height * width)
    rows = np.bincount(ys - y0, minlength=height)  # [height] pixels per row
    quarter = max(1, height // 4)
    top, bottom = rows[:quarter].mean(), rows[-quarter:].mean()
    if top < 0.6 * bottom:
        return "triangle"
    return "square" if fill >= 0.87 else "circle"


def detect(image: Image.Image | np.ndarray, *, max_distance: float = 120.0, min_area: float = 0.012) -> list[Shape]:
    """Find the shapes in an RGB image.

    Pixels are assigned to the nearest palette colour (or the background; pixels farther than ``max_distance`` from
    every reference colour are background), each colour's 4-connected components are blobs, blobs smaller than
    ``min_area`` (fraction of the image area) are dropped as noise, and each blob is classified by
    :func:`classify_blob`. Shapes are returned in reading order (top to bottom, then left to right).

    Args:
        image: PIL image (converted to RGB) or an ``[H, W, 3]`` array in 0..255.
    """
    if isinstance(image, Image.Image):
        pixels = np.asarray(image.convert("RGB"))
    else:
        pixels = np.asarray(image)
        if pixels.ndim != 3 or pixels.shape[-1] != 3:
            raise ValueError(f"detect() needs an RGB image as [H, W, 3]; got an array of shape {pixels.shape}")
    labels = _segment_colors(pixels, max_distance)
    area_floor = min_area * labels.size
    colors = list(PALETTE)
    shapes = []
    for index, color in enumerate(colors):
        for points in _components(labels == index):
            if len(points) < area_floor:
                continue
            ys, xs = points[:, 0], points[:, 1]
            box = (int(xs.min()), int(ys.min()), int(xs.max()) + 1, int(ys.max()) + 1)
            shapes.append(Shape(classify_blob(points), color, box))
    shapes.sort(key=lambda s: (s.box[1], s.box[0]))
    return shapes


# ---------------------------------------------------------------------------------------------------------------------
# Prompt rows


def prompt_split(prompt: str, *, holdout_fraction: float = 0.2) -> Literal["train", "test"]:
    """Deterministic train/test assignment of a prompt by a hash of its text (independent of any seed)."""
    digest = int(hashlib.sha256(prompt.encode()).hexdigest()[:8], 16)
    return "test" if digest / 0xFFFFFFFF < holdout_fraction else "train"


def shapes_t2i_rows(
    size: int,
    seed: int,
    *,
    split: Literal["train", "test", "all"] = "all",
    holdout_fraction: float = 0.2,
    templates: tuple[str, ...] | list[str] = TEMPLATES,
    colors: tuple[str, ...] | list[str] = tuple(PALETTE),
    kinds: tuple[str, ...] | list[str] = KINDS,
    max_count: int = 3,
    image_size: int = 32,
) -> list[dict[str, Any]]:
    """``size`` text-to-image prompt rows of the shapes world.

    Each row is ``{"prompt": str, "target": parse_prompt(prompt), "template": str, "split": "train" | "test"}``; the
    ``geneval_shapes`` reward reads ``target``. Prompts are assigned to ``train`` / ``test`` by :func:`prompt_split`,
    so held-out prompts never appear in the training split whatever the seed.

    Args:
        size: number of rows.
        seed: seed of the scene sampler (rows are a pure function of the arguments).
        split: keep only prompts of this split.
        templates: prompt templates to draw from (uniformly), see :func:`sample_scene`.
    """
    if size < 0:
        raise ValueError(f"size={size} must be >= 0")
    if split not in ("train", "test", "all"):
        raise ValueError(f"split={split!r} must be 'train', 'test' or 'all'")
    if not 0.0 < holdout_fraction < 1.0:
        raise ValueError(f"holdout_fraction={holdout_fraction} must be in (0, 1)")
    templates = _check_choices("templates", templates, TEMPLATES)
    rng = np.random.default_rng(seed)
    rows: list[dict[str, Any]] = []
    attempts = 0
    while len(rows) < size:
        attempts += 1
        if attempts > 1000 * (size + 10):
            raise RuntimeError(f"split={split!r} holds too few prompts for these colors/kinds/templates")
        template = templates[int(rng.integers(len(templates)))]
        scene = sample_scene(rng, size=image_size, template=template, colors=colors, kinds=kinds, max_count=max_count)
        prompt = describe(scene)
        row_split = prompt_split(prompt, holdout_fraction=holdout_fraction)
        if split != "all" and row_split != split:
            continue
        rows.append({"prompt": prompt, "target": parse_prompt(prompt), "template": template, "split": row_split})
    return rows
