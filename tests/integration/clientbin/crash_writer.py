"""Start a run, journal one assistant turn with 3 tool calls and 2 of their results, then
wait to be killed (the test sends SIGKILL)."""

from __future__ import annotations

import argparse
import signal

import journald_client as jc

from tests.integration.clientbin.common import FP, say


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--socket", required=True)
    ap.add_argument("--run-id", required=True)
    args = ap.parse_args()
    client = jc.Client(args.socket, name="crash-writer")
    run = client.start(args.run_id, FP, "read three files")
    calls = [
        {"type": "tool_use", "id": f"toolu_{i}", "name": "read", "input": {"path": f"f{i}.txt"}}
        for i in (1, 2, 3)
    ]
    run.assistant([{"type": "text", "text": "Reading."}, *calls], stop_reason="tool_use")
    run.tool_result("toolu_1", "one")
    run.tool_result("toolu_2", "two")
    say("READY", run.last_seq)
    while True:
        signal.pause()  # until the test's SIGKILL


if __name__ == "__main__":
    main()
