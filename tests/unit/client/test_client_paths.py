"""The client's default socket path rule (the daemon imports the same function)."""

from __future__ import annotations

import os
import tempfile

import pytest
from journald_client.paths import default_socket_path, grpc_target


def test_journald_socket_env_wins_over_everything() -> None:
    env = {"JOURNALD_SOCKET": "/run/x/j.sock", "XDG_RUNTIME_DIR": "/run/user/1"}
    assert default_socket_path(env) == "/run/x/j.sock"


def test_xdg_runtime_dir_is_used_when_no_explicit_socket_is_set() -> None:
    env = {"XDG_RUNTIME_DIR": "/run/user/1000"}
    assert default_socket_path(env) == "/run/user/1000/journald/journald.sock"


def test_an_empty_journald_socket_falls_through_to_the_next_rule() -> None:
    env = {"JOURNALD_SOCKET": "", "XDG_RUNTIME_DIR": "/run/user/7"}
    assert default_socket_path(env) == "/run/user/7/journald/journald.sock"


def test_without_either_variable_a_per_user_temp_dir_is_used() -> None:
    expected = os.path.join(tempfile.gettempdir(), f"journald-{os.getuid()}", "journald.sock")
    assert default_socket_path({}) == expected


def test_the_process_environment_is_read_when_none_is_given(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("JOURNALD_SOCKET", "/tmp/from-env.sock")
    assert default_socket_path() == "/tmp/from-env.sock"
    assert grpc_target() == "unix:/tmp/from-env.sock"


def test_targets_accept_paths_and_unix_targets() -> None:
    assert grpc_target("/a/b.sock") == "unix:/a/b.sock"
    assert grpc_target("unix:///a/b.sock") == "unix:///a/b.sock"
    assert grpc_target("rel.sock") == "unix:" + os.path.abspath("rel.sock")
