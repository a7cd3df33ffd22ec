"""The shared storage contract runs against every backend of the registry.

Each backend ``NAME`` of ``journald.storage.registry`` has a factory module
``tests/storage/backend_NAME.py`` that opens it through the registry with test settings:
``async def make_store(tmp_path: Path) -> Store`` and ``async def reopen_store(store, tmp_path)
-> Store`` (a fresh store over the same data, as after a daemon restart). A registered backend
without one fails the collection (tests/unit/test_backend_registry.py names it).
"""

from __future__ import annotations

import importlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from journald.storage import registry
from journald.storage.base import Store

BACKENDS = registry.names()


def factory(name: str) -> Any:
    return importlib.import_module(f"tests.storage.backend_{name}")


@pytest.fixture(params=BACKENDS)
def backend_name(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
async def store(backend_name: str, tmp_path: Path) -> AsyncIterator[Store]:
    s: Store = await factory(backend_name).make_store(tmp_path)
    try:
        yield s
    finally:
        await s.close()
