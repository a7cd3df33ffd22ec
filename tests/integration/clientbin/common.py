"""What the client test programs share: the fingerprint and a line printer."""

from __future__ import annotations

import argparse
import sys

import journald_client as jc

FP = jc.compute(
    provider="anthropic",
    model="claude-test",
    system_prompt=["You are a careful agent."],
    tools=[{"name": "read", "description": "read a file", "input_schema": {"type": "object"}}],
    thinking="off",
    max_tokens=1024,
    max_iterations=50,
)


def say(*parts: object) -> None:
    print(*parts, flush=True)
    sys.stdout.flush()


def writer_args() -> argparse.ArgumentParser:
    """The arguments every writer program takes: where, which run, when to stop."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--socket", required=True)
    ap.add_argument("--run-id", required=True)
    ap.add_argument("--stop-file", required=True)
    ap.add_argument("--max-steps", type=int, default=2000)
    return ap
