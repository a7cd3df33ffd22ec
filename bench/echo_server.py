"""The framework's limit: a no-op unary gRPC echo on a unix socket, served like the daemon
(grpc.aio on a uvloop event loop, the same server options), with no protobuf at all (the
handler receives and returns raw bytes). Two variants answer only after another task ran
(``EchoAfterTask``) or after a thread ran a no-op (``EchoAfterThread``): what a handler that
waits costs gRPC and the loop, apart from what it waits for (bench/cpu_per_record.py).
Run as a subprocess by bench/run_all.py:

    .venv/bin/python bench/echo_server.py /tmp/x/echo.sock

It serves until SIGTERM. The client side lives in bench/agents.py (system ``echo``).
"""

from __future__ import annotations

import asyncio
import signal
import sys

METHOD = "/journald.bench.Echo/Echo"
AFTER_TASK = "/journald.bench.Echo/EchoAfterTask"
AFTER_THREAD = "/journald.bench.Echo/EchoAfterThread"
ABSORB = "/journald.bench.Echo/Absorb"
"""Answers an empty message: the framework's cost of a large request with a small answer
(a 16-record Append's bytes in, its acks out)."""


async def serve(socket_path: str) -> None:
    import grpc

    loop = asyncio.get_running_loop()

    async def echo(request: bytes, context: object) -> bytes:
        return request

    async def echo_after_task(request: bytes, context: object) -> bytes:
        # answers once another task has run, as an Append waits for its group's flusher task
        await loop.create_task(asyncio.sleep(0))
        return request

    async def echo_after_thread(request: bytes, context: object) -> bytes:
        # answers once a thread has run a no-op, as an Append waits for a writer thread
        await loop.run_in_executor(None, bytes)
        return request

    async def absorb(request: bytes, context: object) -> bytes:
        return b""

    handler = grpc.method_handlers_generic_handler(
        "journald.bench.Echo",
        {
            "Echo": grpc.unary_unary_rpc_method_handler(echo),
            "EchoAfterTask": grpc.unary_unary_rpc_method_handler(echo_after_task),
            "EchoAfterThread": grpc.unary_unary_rpc_method_handler(echo_after_thread),
            "Absorb": grpc.unary_unary_rpc_method_handler(absorb),
        },
    )
    server = grpc.aio.server(
        options=[
            ("grpc.max_receive_message_length", 64 * 1024 * 1024),
            ("grpc.max_send_message_length", 64 * 1024 * 1024),
            ("grpc.so_reuseport", 0),
        ]
    )
    server.add_generic_rpc_handlers((handler,))
    server.add_insecure_port(f"unix://{socket_path}")
    await server.start()
    stop = asyncio.Event()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    loop.add_signal_handler(signal.SIGINT, stop.set)
    print("ready", flush=True)
    await stop.wait()
    await server.stop(0.5)


def main() -> int:
    import uvloop

    uvloop.run(serve(sys.argv[1]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
