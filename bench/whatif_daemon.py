"""The real daemon with its record validation swapped, to measure in the same run what the
shipped validator costs and what it bought (bench/run_all.py, step ``whatif``; never shipped):

    .venv/bin/python bench/whatif_daemon.py jsonschema serve --socket ... --data-dir ...
    .venv/bin/python bench/whatif_daemon.py off serve ...

* ``jsonschema``: every record evaluated by ``jsonschema`` against the published schema, as
  the daemon did before the compiled predicate (``journald/schema_predicate.py``) replaced it
  on the accept path; same errors, same float refusal;
* ``off``: no schema validation at all (the bound for any faster validator).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: F401 - puts the repo root on sys.path


def patch(mode: str) -> None:
    import journald.server.service as service
    from journald import validation

    if mode == "off":
        service.validate_record = lambda rec: None  # type: ignore[assignment]
        return
    if mode != "jsonschema":
        raise SystemExit(f"unknown mode {mode!r}: jsonschema or off")
    # Make the compiled predicate refuse everything, so each record takes the jsonschema path
    # (which then accepts a valid record): exactly the validator as it was.
    validation._is_valid = lambda name: lambda instance: False  # type: ignore[assignment]


def main() -> int:
    mode = sys.argv.pop(1)
    patch(mode)
    from journald.cli import main as journald_main

    sys.argv[0] = "journald"
    return int(journald_main() or 0)


if __name__ == "__main__":
    raise SystemExit(main())
