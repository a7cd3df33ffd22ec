"""The shared storage contract runs against every backend of the registry.

Each backend ``NAME`` of ``journald.storage.registry`` has a factory module
``tests/storage/backend_NAME.py`` with ``async def options(tmp_path: Path) -> BackendOptions``:
the test settings the registry opens it with (the same store for the same ``tmp_path``). A
registered backend without one fails the collection (tests/unit/storage/test_backend_registry.py
names it). ``factory(name)`` opens through the registry: ``make_store``, ``reopen_store`` (a
fresh store over the same data, as after a daemon restart) and ``open`` (records,
checkpoints and attachments, for the checkpoint and attachment stores' own suites).
"""

from __future__ import annotations

import importlib
from collections.abc import AsyncIterator, Iterable
from pathlib import Path

import pytest

from journald.storage import registry
from journald.storage.base import Store
from journald.storage.registry import OpenedBackend, open_backend

BACKENDS = registry.names()


def backend_params(names: Iterable[str] = BACKENDS) -> list[object]:
    """``names`` as pytest params; a backend that needs a nats-server carries the ``jetstream``
    mark, so ``make test-fast`` (``-m "not jetstream"``) runs the others without one."""
    return [
        pytest.param(n, marks=pytest.mark.jetstream)
        if registry.backend(n).nats
        else pytest.param(n)
        for n in names
    ]


class Factory:
    def __init__(self, name: str) -> None:
        self.name = name
        self.module = importlib.import_module(f"tests.storage.backend_{name}")

    async def open(self, tmp_path: Path) -> OpenedBackend:
        return await open_backend(self.name, await self.module.options(tmp_path))

    async def make_store(self, tmp_path: Path) -> Store:
        return (await self.open(tmp_path)).records

    async def reopen_store(self, store: Store, tmp_path: Path) -> Store:
        if not registry.backend(self.name).durable:
            return store  # nothing outlives the process: the same object stands for "after"
        await store.close()
        return await self.make_store(tmp_path)


def factory(name: str) -> Factory:
    return Factory(name)


@pytest.fixture(params=backend_params())
def backend_name(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
async def store(backend_name: str, tmp_path: Path) -> AsyncIterator[Store]:
    s: Store = await factory(backend_name).make_store(tmp_path)
    try:
        yield s
    finally:
        await s.close()


@pytest.fixture
async def opened_backend(backend_name: str, tmp_path: Path) -> AsyncIterator[OpenedBackend]:
    opened = await factory(backend_name).open(tmp_path)
    try:
        yield opened
    finally:
        await opened.close()
