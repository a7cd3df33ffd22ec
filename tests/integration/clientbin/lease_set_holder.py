"""Hold ``--runs`` runs over one ``LeaseSet`` stream (each created with one user record), say
their lease ids, then wait to be killed (the test sends SIGKILL)."""

from __future__ import annotations

import argparse
import signal

import journald_client as jc

from tests.integration.clientbin.common import FP, say


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--socket", required=True)
    ap.add_argument("--prefix", required=True)
    ap.add_argument("--runs", type=int, default=4)
    args = ap.parse_args()
    client = jc.Client(args.socket, name="lease-set-holder")
    leases = client.lease_set()
    runs = [leases.start(f"{args.prefix}-{i}", FP, "hold me") for i in range(args.runs)]
    for run in runs:
        run.user(f"written by {run.run_id}")
    say("READY", *(f"{r.run_id}={r.lease_id}" for r in runs))
    while True:
        signal.pause()  # until the test's SIGKILL


if __name__ == "__main__":
    main()
