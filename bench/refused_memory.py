"""Daemon memory after many refused large requests (issue 13, item 9).

Starts a real daemon (file backend, temp data dir), then sends ``--requests`` Verify calls for
run id ``../x`` padded with an unknown field to ``--pad-mib`` MiB, through the unix socket.
Each is refused (``invalid_id``) before anything is read from disk. Prints the daemon's VmRSS
idle, after a few warm-up calls, and after the batch (measured again after ``--settle-s``,
the time the daemon takes to give memory back), and the ratio to idle::

    .venv/bin/python bench/refused_memory.py --requests 1000 --pad-mib 15

``--max-message-bytes`` passes a cap to the daemon (a build with a larger default takes the
100 MiB requests of the original report: ``--pad-mib 100 --max-message-bytes 256MiB``).
``--stop-at-mib`` ends the batch early when the daemon grows past it (the leak this measures
took a daemon to 6 GiB in 60 calls), and says so.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import common  # noqa: F401  (puts the repo root on sys.path)
import grpc

MIB = 1024 * 1024


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=1000)
    ap.add_argument("--pad-mib", type=int, default=15)
    ap.add_argument("--max-message-bytes", default="")
    ap.add_argument("--settle-s", type=float, default=3.0)
    ap.add_argument("--stop-at-mib", type=int, default=4096)
    args = ap.parse_args(argv)

    from journald_client.pb import journal_pb2 as pb

    from tests.daemon import Daemon
    from tests.integration.rpc import METHOD_PREFIX, RAW_BYTES, padded

    extra = ("--max-message-bytes", args.max_message_bytes) if args.max_message_bytes else ()
    with (
        tempfile.TemporaryDirectory(prefix="jd-refused-") as tmp,
        Daemon(Path(tmp), "file", *extra) as d,
    ):
        channel = grpc.insecure_channel(
            d.target, options=[("grpc.max_send_message_length", 1 << 30)]
        )
        verify = channel.unary_unary(METHOD_PREFIX + "Verify", **RAW_BYTES)
        small = pb.VerifyRequest(run_id="../x").SerializeToString()
        big = padded(pb.VerifyRequest(run_id="../x"), args.pad_mib * MIB)
        codes: dict[str, int] = {}

        def send(data: bytes) -> None:
            try:
                verify(data, timeout=60)
                codes["OK"] = codes.get("OK", 0) + 1
            except grpc.RpcError as exc:
                name = exc.code().name
                codes[name] = codes.get(name, 0) + 1

        idle = d.vm_rss_bytes() / MIB
        for _ in range(20):
            send(small)
        warm = d.vm_rss_bytes() / MIB
        t0 = time.perf_counter()
        sent = 0
        peak = warm
        for sent in range(1, args.requests + 1):
            send(big)
            if sent % 10 == 0:
                peak = max(peak, d.vm_rss_bytes() / MIB)
                if peak > args.stop_at_mib:
                    print(f"stopped after {sent} requests: the daemon passed {peak:.0f} MiB")
                    break
        took = time.perf_counter() - t0
        after = d.vm_rss_bytes() / MIB
        time.sleep(args.settle_s)
        settled = d.vm_rss_bytes() / MIB
        channel.close()
    print(
        f"requests {sent} x {args.pad_mib} MiB in {took:.1f} s, answers {codes}\n"
        f"VmRSS idle {idle:.1f} MiB, warm {warm:.1f} MiB, peak {peak:.1f} MiB, "
        f"after {after:.1f} MiB, after {args.settle_s:.0f} s {settled:.1f} MiB "
        f"({settled / idle:.2f}x idle)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
