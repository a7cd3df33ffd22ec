"""``python -m journald.cli``: the same entry point as the ``journald`` script."""

from journald.cli.main import main

raise SystemExit(main())
