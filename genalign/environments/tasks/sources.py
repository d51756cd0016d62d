"""The task families as data sources: every row generator of ``TASKS`` is also the procedural task of the same name
(``genalign.data.procedural.PROCEDURAL_TASKS``), so a config reads its rows with
``data.train: {source: "procedural:calculator_arithmetic", args: {size: ..., seed: ..., split: train}}`` and runs them
with ``policy.multi_turn.environments`` naming the environment (each row's ``env`` column names it).

The generators already follow the procedural convention (``(size, seed, **args) -> list[dict]``, the ``split`` by
``genalign.data.procedural.split_of``), so they are registered unchanged. The registration happens when
``genalign.environments`` is imported, which loading the config of a multi-turn policy does before the data section is
checked; from Python, import ``genalign.environments`` before calling ``genalign.data.load_rows`` on such a source.
"""

from __future__ import annotations

from genalign.data.procedural import PROCEDURAL_TASKS
from genalign.environments.tasks import arithmetic, guessing, lookup  # noqa: F401  (each registers its family)
from genalign.environments.tasks.common import TASKS

for _name in TASKS.names():  # a name that a data task already has fails here: "procedural task ... registered twice"
    PROCEDURAL_TASKS.register(_name, source="genalign", multi_turn=True)(TASKS.get(_name))
