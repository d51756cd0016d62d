"""``python -m genalign.catalog``: regenerate the catalogue (:mod:`genalign.catalog.build`)."""

from genalign.catalog.build import main

raise SystemExit(main())
