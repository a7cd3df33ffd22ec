"""Raw HTTP/2 on a unix socket, for probes no gRPC client can send (tests and bench only).

A probe speaks just enough HTTP/2 to open one gRPC call and then misbehave: the preface, an
empty SETTINGS, the ack of the server's SETTINGS and of its PINGs (so the connection looks
alive to keepalive), a HEADERS frame for a method and DATA frames with whatever bytes the
test wants. ``closed_or_answered`` tells whether the server ended the stream or the
connection since.
"""

from __future__ import annotations

import socket
import struct

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
DATA, HEADERS, RST_STREAM, SETTINGS, PING, GOAWAY = 0x0, 0x1, 0x3, 0x4, 0x6, 0x7
END_STREAM, END_HEADERS, ACK = 0x1, 0x4, 0x1


def frame(kind: int, flags: int, stream: int, payload: bytes = b"") -> bytes:
    return struct.pack(">I", len(payload))[1:] + bytes([kind, flags]) + struct.pack(">I", stream)


def _hpack_int(value: int) -> bytes:
    if value < 127:
        return bytes([value])
    out, value = [127], value - 127
    while value >= 128:
        out.append(value % 128 + 128)
        value //= 128
    return bytes([*out, value])


def _literal(name: str, value: str) -> bytes:
    """A header as 'literal without indexing, new name', no Huffman coding."""
    n, v = name.encode(), value.encode()
    return b"\x00" + _hpack_int(len(n)) + n + _hpack_int(len(v)) + v


def headers_block(path: str) -> bytes:
    return b"".join(
        _literal(k, v)
        for k, v in (
            (":method", "POST"),
            (":scheme", "http"),
            (":path", path),
            (":authority", "localhost"),
            ("content-type", "application/grpc"),
            ("te", "trailers"),
        )
    )


class Probe:
    """One HTTP/2 connection to a unix socket; stream 1 is the call under test."""

    def __init__(self, path: str, timeout_s: float = 5.0) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(timeout_s)
        self.sock.connect(path)
        self.sock.sendall(PREFACE + frame(SETTINGS, 0, 0))
        self._buf = b""
        self.frames: list[tuple[int, int, int, bytes]] = []
        self.closed = False

    def open_call(self, method: str, data: bytes, end_stream: bool = True) -> None:
        """HEADERS for ``method`` on stream 1, then ``data`` in one DATA frame."""
        block = headers_block(method)
        self.sock.sendall(
            frame(HEADERS, END_HEADERS, 1, block)
            + block
            + frame(DATA, END_STREAM if end_stream else 0, 1, data)
            + data
        )

    def pump(self, wait_s: float = 0.05) -> None:
        """Read what the server sent (acking SETTINGS and PINGs) for up to ``wait_s``."""
        if self.closed:
            return
        self.sock.settimeout(wait_s)
        try:
            chunk = self.sock.recv(65536)
        except TimeoutError:
            return
        except OSError:
            self.closed = True
            return
        if not chunk:
            self.closed = True
            return
        self._buf += chunk
        while len(self._buf) >= 9:
            size = int.from_bytes(self._buf[:3], "big")
            if len(self._buf) < 9 + size:
                break
            kind, flags = self._buf[3], self._buf[4]
            stream = int.from_bytes(self._buf[5:9], "big") & 0x7FFFFFFF
            payload = self._buf[9 : 9 + size]
            self._buf = self._buf[9 + size :]
            self.frames.append((kind, flags, stream, payload))
            try:
                if kind == SETTINGS and not flags & ACK:
                    self.sock.sendall(frame(SETTINGS, ACK, 0))
                elif kind == PING and not flags & ACK:
                    self.sock.sendall(frame(PING, ACK, 0, payload) + payload)
            except OSError:
                self.closed = True

    def stream_ended(self) -> bool:
        """The server answered or reset stream 1, went away, or closed the connection."""
        self.pump()
        for kind, flags, stream, _ in self.frames:
            if stream == 1 and (kind == RST_STREAM or (kind == HEADERS and flags & END_STREAM)):
                return True
            if kind == GOAWAY:
                return True
        return self.closed

    def close(self) -> None:
        self.sock.close()


def grpc_message(body: bytes, declared: int | None = None) -> bytes:
    """A gRPC length-prefixed message whose prefix says ``declared`` bytes (default: its own
    length)."""
    return b"\x00" + struct.pack(">I", len(body) if declared is None else declared) + body
