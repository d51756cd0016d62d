"""The strict config loader: types, Literal values, unknown keys, overrides, validate() hooks."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

import pytest

from genalign.config.core import ConfigError, apply_overrides, from_dict, load_yaml, to_dict


@dataclass
class Inner:
    rate: float = 0.5
    mode: Literal["fast", "slow"] = "fast"

    def validate(self) -> None:
        if self.rate < 0:
            raise ValueError(f"rate = {self.rate} must be >= 0")


@dataclass
class Outer:
    name: str = "x"
    steps: int = 3
    flag: bool = False
    limit: int | None = None
    tags: list[str] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)
    inner: Inner = field(default_factory=Inner)
    items: list[Inner] = field(default_factory=list)


def test_builds_nested_dataclasses_and_converts_ints_to_floats():
    cfg = from_dict(Outer, {"steps": 5, "inner": {"rate": 1}, "items": [{"mode": "slow"}], "limit": None})
    assert cfg.steps == 5 and cfg.inner.rate == 1.0 and isinstance(cfg.inner.rate, float)
    assert cfg.items[0].mode == "slow" and cfg.limit is None
    assert to_dict(cfg)["inner"] == {"rate": 1.0, "mode": "fast"}


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"stepz": 1}, "unknown config key 'stepz'. Did you mean 'steps'?"),
        ({"inner": {"rat": 1}}, "unknown config key inner.'rat'"),
        ({"steps": "3"}, "steps: expected an integer, got '3'"),
        ({"steps": True}, "steps: expected an integer"),
        ({"flag": "yes"}, "flag: expected true or false"),
        (
            {"inner": {"mode": "fats"}},
            "inner.mode: 'fats' is not valid; use one of 'fast', 'slow'. Did you mean 'fast'?",
        ),
        ({"tags": "a"}, "tags: expected a list"),
        ({"items": [{"rate": -1}]}, "rate = -1.0 must be >= 0"),
        ({"name": 5}, "name: expected a string"),
    ],
)
def test_bad_values_name_the_field_and_the_fix(data, message):
    with pytest.raises(ConfigError) as err:
        from_dict(Outer, data)
    assert message in str(err.value)


def test_overrides_parse_yaml_values_and_address_lists():
    data = {"steps": 1, "items": [{"rate": 0.1}]}
    apply_overrides(data, ["steps=7", "inner.mode=slow", "items.0.rate=2e-3", "tags=[a, b]", "limit=null"])
    cfg = from_dict(Outer, data)
    assert (cfg.steps, cfg.inner.mode, cfg.items[0].rate, cfg.tags, cfg.limit) == (7, "slow", 2e-3, ["a", "b"], None)


@pytest.mark.parametrize("override", ["steps", "items.5.rate=1", "items.x.rate=1"])
def test_malformed_overrides_are_errors(override):
    with pytest.raises(ConfigError):
        apply_overrides({"items": [{"rate": 0.1}]}, [override])


def test_load_yaml_errors(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_yaml(tmp_path / "missing.yaml")
    (tmp_path / "list.yaml").write_text("- 1\n- 2\n")
    with pytest.raises(ConfigError, match="mapping at top level"):
        load_yaml(tmp_path / "list.yaml")
