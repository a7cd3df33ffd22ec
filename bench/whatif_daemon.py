"""The real daemon with its record validation swapped, to measure what a proposed change to
``journald/validation.py`` would buy (bench/run_all.py, step ``whatif``; never shipped):

    .venv/bin/python bench/whatif_daemon.py dispatch serve --socket ... --data-dir ...
    .venv/bin/python bench/whatif_daemon.py off serve ...

* ``dispatch``: each content block is checked against its own type's schema only (the
  prototype in bench/profile_append.py; same envelope and payload schemas otherwise, floats
  still refused); records of other kinds go through the shipped ``validate_record``;
* ``off``: no schema validation at all (the upper bound of any faster validator).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: F401 - puts the repo root on sys.path


def patch(mode: str) -> None:
    import journald.server.service as service
    from journald import validation
    from journald.errors import InvalidRecord

    shipped = validation.validate_record
    if mode == "off":
        service.validate_record = lambda rec: None  # type: ignore[assignment]
        return
    if mode != "dispatch":
        raise SystemExit(f"unknown mode {mode!r}: dispatch or off")
    from profile_append import dispatch_validator

    check = dispatch_validator()

    def validate(rec: Any) -> None:
        if rec.kind not in ("assistant", "tool_result", "user"):
            shipped(rec)
            return
        errors = check(rec)
        if errors:
            raise InvalidRecord(f"field {rec.kind}: {errors[0].message}")
        validation._no_floats(rec.payload, rec.kind)

    service.validate_record = validate  # type: ignore[assignment]


def main() -> int:
    mode = sys.argv.pop(1)
    patch(mode)
    from journald.cli import main as journald_main

    sys.argv[0] = "journald"
    return int(journald_main() or 0)


if __name__ == "__main__":
    raise SystemExit(main())
