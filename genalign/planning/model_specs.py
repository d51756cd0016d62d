"""Where the planner gets a model's architecture: its local folder when it is on this machine, else the table of
published configs (:mod:`.architectures`). Weights are never read; a folder needs only its config files."""

from __future__ import annotations

import json
from pathlib import Path

from genalign.planning.architectures import ComponentSpec, PublishedModel, published_model

#: model_index.json libraries whose components the planner builds (schedulers, tokenizers hold no tensors).
_BUILT_LIBRARIES = ("diffusers", "transformers")


def _local_folder(name: str) -> Path | None:
    from genalign.assets import BUILTIN_PREFIX, resolve

    if name.startswith(BUILTIN_PREFIX):
        return resolve(name)
    path = Path(name).expanduser()
    return path if path.is_dir() else None


def _read_json(path: Path) -> dict:
    return json.loads(path.read_text())


def _is_model_class(library: str | None, class_name: str | None) -> bool:
    """Whether a model_index.json entry is a model with weights (not a scheduler, tokenizer or empty slot)."""
    if library not in _BUILT_LIBRARIES or not class_name:
        return False
    import importlib

    module = importlib.import_module(library)
    base = module.ModelMixin if library == "diffusers" else module.PreTrainedModel
    return isinstance(getattr(module, class_name, None), type) and issubclass(getattr(module, class_name), base)


def _pipeline_spec(folder: Path) -> PublishedModel:
    """The components of a diffusers pipeline folder, each from its sub-folder's config.json."""
    index = _read_json(folder / "model_index.json")
    components = {}
    for role, entry in index.items():
        if role.startswith("_") or not isinstance(entry, list) or not _is_model_class(*entry):
            continue
        config_file = folder / role / "config.json"
        if not config_file.is_file():
            raise FileNotFoundError(f"{folder}: model_index.json names {role!r} but {config_file} is missing.")
        components[role] = ComponentSpec(entry[0], entry[1], _read_json(config_file))
    return PublishedModel(components, source=f"{folder}/model_index.json", pipeline_class=index.get("_class_name"),
                          pipeline_config=index)  # fmt: skip


def _transformers_spec(folder: Path, field: str) -> PublishedModel:
    """A transformers model folder; a model type transformers does not know (remote code) is looked up by name."""
    from transformers import CONFIG_MAPPING

    config = _read_json(folder / "config.json")
    if config.get("model_type") in CONFIG_MAPPING:
        class_name = (config.get("architectures") or [""])[0]
        return PublishedModel({"model": ComponentSpec("transformers", class_name, config)}, f"{folder}/config.json")
    published = published_model(str(folder))
    if published is None:
        raise ValueError(
            f"{field}={str(folder)!r}: model_type {config.get('model_type')!r} needs remote code, which the planner "
            "does not run, and genalign/planning/architectures.py has no stand-in for this name; add an entry there "
            "(a transformers class with the same parameter shapes) to plan it."
        )
    return published


def resolve_model_spec(name: str, *, field: str = "policy.model") -> PublishedModel:
    """The architecture of ``name`` (a ``builtin:`` asset, a local folder or a hub id).

    Raises:
        ValueError: ``name`` is neither a folder here nor in the table of published configs; the message says how to
            plan it (its config files are enough).
    """
    folder = _local_folder(name)
    if folder is not None:
        if (folder / "model_index.json").is_file():
            return _pipeline_spec(folder)
        if (folder / "config.json").is_file():
            return _transformers_spec(folder, field)
    published = published_model(name)
    if published is None:
        raise ValueError(
            f"{field}={name!r} is not a folder on this machine and not in genalign's table of published "
            "architectures (genalign/planning/architectures.py). Put its config files in a folder (config.json; for "
            "a diffusers pipeline model_index.json and each component's config.json; no weights needed) and point "
            f"{field} at it, or add the published config to the table."
        )
    return published


__all__ = ["resolve_model_spec"]
