"""The shipped NATS deployment files are valid and describe a stream journald accepts."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from nats.js.api import StreamConfig

from journald.storage.jetstream.store import check_stream_config
from tests.nats_server import nats_server_binary

DEPLOY = Path(__file__).resolve().parents[3] / "deploy" / "nats"


@pytest.mark.parametrize("conf", sorted(p.name for p in DEPLOY.glob("*.conf")))
def test_each_server_config_is_valid_and_fsyncs_always(conf: str) -> None:
    path = DEPLOY / conf
    assert "sync_interval: always" in path.read_text()
    done = subprocess.run(
        [nats_server_binary(), "-c", str(path), "-t"],
        capture_output=True,
        text=True,
        timeout=20,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize("name", ["stream.json", "stream-r3.json"])
def test_the_stream_definitions_pass_the_stores_configuration_check(name: str) -> None:
    cfg = StreamConfig.from_response(json.loads((DEPLOY / name).read_text()))
    assert check_stream_config(cfg.name, cfg) == "journald"


def test_the_readme_says_jetstream_fsyncs_only_every_two_minutes_by_default() -> None:
    text = (DEPLOY / "README.md").read_text()
    assert "every 2 minutes" in text
    assert "sync_interval: always" in text


def test_the_readme_documents_every_nats_flag_and_secret_of_serve() -> None:
    import argparse

    from journald.cli import add_nats_arguments
    from journald.storage.jetstream.options import PASSWORD_ENV, TOKEN_ENV

    parser = argparse.ArgumentParser()
    add_nats_arguments(parser, stream=True)
    flags = [o for a in parser._actions for o in a.option_strings if o.startswith("--nats-")]
    text = (DEPLOY / "README.md").read_text()
    missing = [f for f in [*flags, "--writer-name", PASSWORD_ENV, TOKEN_ENV] if f not in text]
    assert missing == []
