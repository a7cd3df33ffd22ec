"""The daemon notices when the socket it listens on is moved away or replaced."""

from __future__ import annotations

import asyncio
import logging
import os
import socket
from pathlib import Path

import pytest

from journald.server import daemon


async def test_a_socket_moved_away_and_replaced_is_logged_once_as_an_error(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(daemon, "SOCKET_CHECK_EVERY_S", 0.01)
    path = tmp_path / "journald.sock"
    ours = socket.socket(socket.AF_UNIX)
    ours.bind(str(path))
    bound = os.lstat(path)
    watching = asyncio.create_task(daemon.watch_socket(path, bound))
    await asyncio.sleep(0.05)
    assert not watching.done()  # still ours: nothing said
    os.rename(path, tmp_path / "moved.sock")
    impostor = socket.socket(socket.AF_UNIX)
    impostor.bind(str(path))  # a new socket at the same path
    with caplog.at_level(logging.ERROR, logger="journald.daemon"):
        await asyncio.wait_for(watching, timeout=10)
    assert "was moved or replaced" in caplog.text
    assert daemon.still_ours(path, bound) is False
    ours.close()
    impostor.close()
