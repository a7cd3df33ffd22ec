"""The journald command line: ``serve`` runs the daemon (``main``), every other command talks to
it (``commands``, ``checkpoint_commands``, ``recover``, ``verify``, ``replay``'s renderings) and
``migrate`` copies runs between stores. The program listing them, with the viewer's ``view``,
is ``journald.program``; nothing registers itself on import."""

from journald.cli.main import add_nats_arguments

__all__ = ["add_nats_arguments"]
