"""The journald command line: ``serve`` runs the daemon (``main``), every other command talks to
it (``commands``, ``checkpoints``, ``recover``, and the viewer's ``view``). Commands are listed
explicitly in ``main.command_modules``; nothing registers itself on import."""

from journald.cli.main import add_nats_arguments, build_parser, main

__all__ = ["add_nats_arguments", "build_parser", "main"]
