"""Append assistant/tool_result pairs to one run until a stop file appears, printing every
acknowledged record (``ACK seq hash duplicate``); then write ``completed`` and exit.

The daemon may be killed and restarted underneath: the client reconnects, re-opens the
run and resends the unacknowledged record at the same seq with the same bytes."""

from __future__ import annotations

import os

import journald_client as jc

from tests.integration.clientbin.common import FP, say, writer_args


def main() -> None:
    ap = writer_args()
    args = ap.parse_args()
    with (
        jc.Client(args.socket, name="steady-writer", reconnect_timeout=60.0) as client,
        client.start(args.run_id, FP, f"steady {args.run_id}") as run,
    ):
        say("ACK", run.last_seq, run.state.last_hash, False)
        for step in range(args.max_steps):
            if os.path.exists(args.stop_file):
                break
            tid = f"toolu_{step}"
            call = {"type": "tool_use", "id": tid, "name": "read", "input": {"step": step}}
            ack = run.assistant(
                [{"type": "text", "text": f"step {step}"}, call], stop_reason="tool_use"
            )
            say("ACK", ack.seq, ack.hash, ack.duplicate)
            ack = run.tool_result(tid, f"result {step}")
            say("ACK", ack.seq, ack.hash, ack.duplicate)
        ack = run.terminal("completed")
        say("ACK", ack.seq, ack.hash, ack.duplicate)
        say("DONE", run.last_seq, run.reconnects)


if __name__ == "__main__":
    main()
