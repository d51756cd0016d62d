"""The seed-method coverage table (docs/coverage.md): which option implements each seed abstract of the methods index.

A seed is covered by the registered options whose ``source`` cites it (``[n]``, the column docs/algorithms.md shows),
by the features outside the registries and the recipes declared in :mod:`genalign.coverage.features`; a seed nothing
covers has a one-line reason in ``genalign/coverage/reasons.yaml``, which also says what a partial implementation
leaves out. :mod:`genalign.coverage.table` builds the rows and checks them; ``python -m genalign.docs`` writes the
table with docs/algorithms.md.
"""
