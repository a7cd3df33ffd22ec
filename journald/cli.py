"""The journald command line: `serve` runs the daemon; every other command talks to it."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="journald", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("serve", help="run the daemon")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    print(f"journald {args.command}: not available in this build yet", file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
