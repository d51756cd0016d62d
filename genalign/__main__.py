"""``python -m genalign ...``: the command line (:mod:`genalign.cli`)."""

from genalign.cli import main

raise SystemExit(main())
