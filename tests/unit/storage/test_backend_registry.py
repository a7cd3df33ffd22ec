"""Which backends exist is said once, in journald/storage/registry.py: serve's --backend
choices, migrate's locations and the storage contract suite all come from it."""

from __future__ import annotations

import argparse
import importlib
from pathlib import Path

import pytest

from journald.cli import migrate
from journald.core.errors import BackendUnavailable, InvalidArgumentError
from journald.program import build_parser
from journald.storage import registry
from journald.storage.registry import Backend, BackendOptions, OpenedBackend
from tests.storage import conftest as contract
from tests.storage.machine_backends import BACKENDS as MACHINE_BACKENDS


def _serve_backend_choices() -> list[str]:
    for action in build_parser()._actions:
        if isinstance(action, argparse._SubParsersAction):
            serve = action.choices["serve"]
            (backend,) = (a for a in serve._actions if a.dest == "backend")
            return list(backend.choices or ())
    raise AssertionError("the parser has no serve command")


def _migrate_help() -> str:
    return migrate.build_parser().format_help()


@pytest.mark.parametrize("name", registry.names())
def test_every_registered_backend_is_a_serve_choice_a_migrate_location_and_a_contract_suite(
    name: str,
) -> None:
    entry = registry.backend(name)
    assert name in _serve_backend_choices()
    assert entry.location in _migrate_help()
    assert registry.parse_location(entry.location)[0] == name
    assert name in contract.BACKENDS
    factory = importlib.import_module(f"tests.storage.backend_{name}")
    assert callable(factory.options)
    assert name in MACHINE_BACKENDS


def test_a_backend_added_to_the_registry_is_offered_by_serve_and_migrate(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async def open_toy(opts: BackendOptions) -> OpenedBackend:
        raise AssertionError("not opened here")

    toy = Backend("toy", "a toy store", "toy:WHERE", open_toy, lambda rest: BackendOptions())
    monkeypatch.setitem(registry.BACKENDS, "toy", toy)
    assert "toy" in _serve_backend_choices()
    assert "toy:WHERE" in _migrate_help()
    assert registry.parse_location("toy:x") == ("toy", BackendOptions())


def test_an_unknown_backend_is_refused_naming_the_registered_ones() -> None:
    with pytest.raises(BackendUnavailable) as info:
        registry.backend("s3")
    for name in registry.names():
        assert name in info.value.message


@pytest.mark.parametrize("text", ["s3:bucket", "file", "file:", "jetstream:nats://h:4222"])
def test_a_location_naming_no_store_is_refused_with_the_forms_that_do(text: str) -> None:
    with pytest.raises(InvalidArgumentError, match=r"use (file|jetstream):"):
        registry.parse_location(text)


@pytest.mark.parametrize("name", ["memory", "file"])  # jetstream: tests/integration
async def test_a_checkpoint_dir_holds_the_fold_marks_and_checkpoints_of_the_backend(
    tmp_path: Path, name: str
) -> None:
    opts = BackendOptions(data_dir=tmp_path / "data", checkpoint_dir=tmp_path / "cps")
    opened = await registry.open_backend(name, opts)
    await opened.checkpoints.save_mark("r1", {"seq": 1})
    assert (tmp_path / "cps" / "r1" / "fold-mark.json").is_file()
    await opened.close()
