"""Where the daemon keeps its data and its socket. Never the working directory.

See docs/design.md#layout and docs/design.md#operations.
"""

from __future__ import annotations

import os
from pathlib import Path

from journald_proto.conventions import default_socket_path

__all__ = ["default_data_dir", "default_socket_path"]


def default_data_dir() -> Path:
    """``$XDG_STATE_HOME/journald``, else ``~/.local/state/journald``."""
    state = os.environ.get("XDG_STATE_HOME")
    base = Path(state) if state and os.path.isabs(state) else Path.home() / ".local" / "state"
    return base / "journald"
