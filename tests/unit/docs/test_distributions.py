"""The generated stubs are one distribution (journald-proto, proto/python) that the daemon and
the Python client both require at its exact version; ``journald_client.pb`` stays the same
modules under the name users imported them by."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import journald_proto.journal_pb2
import journald_proto.journal_pb2_grpc

ROOT = Path(__file__).resolve().parents[3]


def _project(path: str) -> dict[str, object]:
    project: dict[str, object] = tomllib.loads((ROOT / path).read_text("utf-8"))["project"]
    return project


def test_the_daemon_and_the_client_require_the_proto_distribution_at_its_version() -> None:
    proto = _project("proto/python/pyproject.toml")
    assert proto["name"] == "journald-proto"
    pin = f"journald-proto=={proto['version']}"
    for owner in ("pyproject.toml", "clients/python/pyproject.toml"):
        deps = _project(owner)["dependencies"]
        assert isinstance(deps, list)
        assert pin in deps, f"{owner} does not require {pin}"


def test_the_client_s_pb_modules_are_the_proto_distribution_s_modules() -> None:
    import journald_client.pb.journal_pb2_grpc
    from journald_client.pb import journal_pb2

    assert journal_pb2 is journald_proto.journal_pb2
    assert journald_client.pb.journal_pb2_grpc is journald_proto.journal_pb2_grpc
    # one class per message: a message built by a user's old import is the daemon's message
    assert isinstance(journal_pb2.AppendRequest(), journald_proto.journal_pb2.AppendRequest)


def test_setup_installs_the_proto_distribution_before_the_client_and_the_daemon() -> None:
    makefile = (ROOT / "Makefile").read_text("utf-8")
    install = re.search(r"^\t\$\(PIP\) (-e .*)$", makefile, re.MULTILINE)
    assert install is not None
    assert install.group(1).split() == ["-e", "proto/python", "-e", "clients/python", "-e", "."]
