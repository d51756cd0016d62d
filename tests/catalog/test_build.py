"""The committed catalogue is what the live registries say today: a registered option, a changed keyword or summary
without regenerating fails here, naming the command that regenerates it."""

from __future__ import annotations

import inspect
import json

from genalign.algorithms import ADVANTAGE_ESTIMATORS, AGGREGATIONS, CLIP_FORMS, OBJECTIVES
from genalign.catalog.build import option_record, render, shipped
from genalign.catalog.registries import LIVE_REGISTRIES, implementations
from genalign.catalog.store import CATALOG_PATH, REGENERATE, CataloguedRegistry


def test_the_committed_catalogue_is_current():
    """(Options that tests or plugins register are not genalign's: the catalogue leaves them out.)"""
    current = CATALOG_PATH.read_text(encoding="utf-8")
    assert current == render(), f"{CATALOG_PATH.name} is out of date; regenerate it with `{REGENERATE}`"
    assert REGENERATE == "python -m genalign.catalog"


def _as_written(default):
    """A default as the catalogue gives it back: through JSON (tuples become lists), else its repr."""
    if default is inspect.Parameter.empty:
        return default
    try:
        return json.loads(json.dumps(default))
    except TypeError:
        return repr(default)


def test_a_catalogued_registry_answers_as_the_live_one():
    """Names, tier, meta that JSON holds, keyword hyper-parameters (defaults, required ones) and binding."""
    for key in LIVE_REGISTRIES:
        live, catalogued = implementations(key), CataloguedRegistry(key)
        names = [name for name in live.names() if shipped(live.get(name))]  # tests register options of their own
        assert catalogued.kind == live.kind and catalogued.names() == names, key
        for name in names:
            assert catalogued.tier(name) == live.tier(name) and catalogued.binding(name) == live.binding(name)
            expected = {k: _as_written(v) for k, v in live.hyperparameters(name).items()}
            assert catalogued.hyperparameters(name) == expected, (key, name)
            meta = catalogued.meta(name)
            assert meta.get("summary") == live.meta(name).get("summary") and "bind" not in meta


def test_an_option_record_holds_its_signature_and_binding():
    grpo = option_record("advantages", ADVANTAGE_ESTIMATORS, "grpo")
    assert grpo["binding"] == "keywords" and grpo["tier"] == "stable"
    assert {"name": "eps", "default": 1e-6, "type": "float"} in grpo["hyperparameters"]
    assert option_record("aggregations", AGGREGATIONS, "seq_mean_token_sum_norm")["hyperparameters"] == [
        {"name": "max_len", "default": None}
    ]  # an object that declares its keywords
    assert option_record("objectives", OBJECTIVES, "clipped_ratio")["binding"] == "keywords"  # declared
    assert option_record("objectives", OBJECTIVES, "lopti")["binding"] == "code"  # a bound form that checks values
    assert option_record("clips", CLIP_FORMS, "ppo")["meta"]["source"]


def test_required_and_unwritable_defaults_are_recorded():
    proxies = CataloguedRegistry("proxies")
    assert proxies.hyperparameters("mc_elbo")["mask_id"] is inspect.Parameter.empty  # supplied by the family
    credit = CataloguedRegistry("credit").option("role_segments")["hyperparameters"]
    assert {"name": "role_rewards", "default": [[0], [1]]}.items() <= next(
        r for r in credit if r["name"] == "role_rewards"
    ).items()  # a tuple default is written as a list


def test_reward_arguments_list_literal_choices():
    arguments = CataloguedRegistry("rewards").arguments("math_equivalence")
    answer_format = next(a for a in arguments if a["name"] == "answer_format")
    assert answer_format["choices"] == ["auto", "boxed", "answer_tags", "last_number"]
