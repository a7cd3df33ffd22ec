"""A real daemon subprocess per test (file backend on a temp data dir)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.daemon import Daemon

BACKEND = os.environ.get("JOURNALD_TEST_BACKEND", "file")


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[Daemon]:
    d = Daemon(tmp_path, BACKEND).start()
    try:
        yield d
    finally:
        d.stop()
