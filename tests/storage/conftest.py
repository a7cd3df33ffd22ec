"""The shared storage contract runs against every backend registered here.

Each backend has a factory module ``tests/storage/backend_<name>.py`` exposing
``async def make_store(tmp_path: Path) -> Store`` and ``async def reopen_store(store, tmp_path)
-> Store`` (a fresh store over the same data, as after a daemon restart). A backend whose
module is missing is simply not part of the suite yet.
"""

from __future__ import annotations

import importlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from journald.storage.base import Store

ALL_BACKENDS = ["memory", "file", "jetstream"]


def _available() -> list[str]:
    out = []
    for name in ALL_BACKENDS:
        try:
            importlib.import_module(f"tests.storage.backend_{name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"tests.storage.backend_{name}":
                raise
            continue
        out.append(name)
    return out


BACKENDS = _available()


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
