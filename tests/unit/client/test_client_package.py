"""The client package stands alone: grpcio, protobuf and journald-proto only, never the daemon
package, and OpenTelemetry strictly optional."""

from __future__ import annotations

import subprocess
import sys

PROBE = """
import sys
{prelude}
import journald_client, journald_client.aio, journald_client.client, journald_client.codec
from journald_client import telemetry
bad = sorted(m for m in sys.modules if m == "journald" or m.startswith("journald."))
print("DAEMON" if bad else "CLEAN", bad)
print("TRACE", telemetry.current_trace(), telemetry.call_metadata())
"""


def _probe(prelude: str = "") -> str:
    out = subprocess.run(
        [sys.executable, "-c", PROBE.format(prelude=prelude)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return out.stdout


def test_importing_the_client_never_imports_the_daemon_package() -> None:
    assert _probe().splitlines()[0] == "CLEAN []"


def test_the_client_works_without_opentelemetry_installed() -> None:
    # a None entry in sys.modules makes `import opentelemetry` raise ImportError
    out = _probe("sys.modules['opentelemetry'] = None")
    assert out.splitlines() == ["CLEAN []", "TRACE None []"]
