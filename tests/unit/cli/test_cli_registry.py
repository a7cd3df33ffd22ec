"""The CLI's commands come from one explicit list of modules, not from import side effects."""

from __future__ import annotations

import argparse

import pytest

from journald.cli.dispatch import Command, add_commands
from journald.program import build_parser, command_modules


def _subcommands(parser: argparse.ArgumentParser) -> set[str]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return set(action.choices)
    raise AssertionError("the parser has no sub-commands")


def test_every_listed_module_contributes_its_commands_to_the_parser() -> None:
    listed = {c.name for m in command_modules() for c in m.COMMANDS}
    assert {"ls", "show", "checkpoint", "restore", "recover", "view"} <= listed
    assert listed | {"serve", "migrate"} == _subcommands(build_parser())


def test_two_commands_with_one_name_are_refused() -> None:
    sub = argparse.ArgumentParser().add_subparsers()
    cmd = Command("ls", "list", lambda p: None, lambda ctx, args: 0)
    with pytest.raises(ValueError, match="share a name"):
        add_commands(sub, [cmd, cmd])
