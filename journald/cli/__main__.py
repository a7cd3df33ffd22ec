"""``python -m journald.cli``: the same entry point as the ``journald`` script."""

from journald.program import main

raise SystemExit(main())
