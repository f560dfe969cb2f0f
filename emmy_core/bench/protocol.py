"""The wire between the harness and its bench worker: length-prefixed JSON frames over pipes.

Why not multiprocessing's queues: they pickle, and nothing in Emmy crosses a process or a
file as pickle. A frame is a 4-byte big-endian length and that many bytes of UTF-8 JSON
(an object). The worker reads frames with `read_frame` (blocking); the harness, which must
never block on a hung worker, feeds whatever bytes arrive to a `FrameReader`.
"""

from __future__ import annotations

import json
import struct
from typing import BinaryIO

MAX_FRAME = 64 * 1024 * 1024
_HEADER = struct.Struct(">I")


class ProtocolError(RuntimeError):
    """A frame that is not a JSON object of a sane length: the peer is broken, not the variant."""


def encode(message: dict[str, object]) -> bytes:
    body = json.dumps(message, allow_nan=False, separators=(",", ":")).encode("utf-8")
    if len(body) > MAX_FRAME:
        raise ProtocolError(f"frame of {len(body)} bytes exceeds {MAX_FRAME}")
    return _HEADER.pack(len(body)) + body


def decode(body: bytes) -> dict[str, object]:
    try:
        message = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise ProtocolError(f"frame is not UTF-8 JSON: {exc}") from None
    if not isinstance(message, dict):
        raise ProtocolError(f"frame is a JSON {type(message).__name__}, not an object")
    return message


def write_frame(stream: BinaryIO, message: dict[str, object]) -> None:
    stream.write(encode(message))
    stream.flush()


def _read_exactly(stream: BinaryIO, n: int) -> bytes | None:
    chunks: list[bytes] = []
    got = 0
    while got < n:
        chunk = stream.read(n - got)
        if not chunk:
            if got == 0:
                return None
            raise ProtocolError(f"stream ended inside a frame ({got} of {n} bytes)")
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def read_frame(stream: BinaryIO) -> dict[str, object] | None:
    """The next frame from a blocking stream; None at a clean end of stream."""
    head = _read_exactly(stream, _HEADER.size)
    if head is None:
        return None
    (length,) = _HEADER.unpack(head)
    if length > MAX_FRAME:
        raise ProtocolError(f"frame length {length} exceeds {MAX_FRAME}")
    body = _read_exactly(stream, length)
    if body is None:
        raise ProtocolError("stream ended after a frame header")
    return decode(body)


class FrameReader:
    """Reassembles frames from bytes as they arrive (non-blocking reads on the harness side)."""

    def __init__(self) -> None:
        self._buf = bytearray()

    def feed(self, data: bytes) -> None:
        self._buf.extend(data)

    def pop(self) -> dict[str, object] | None:
        """The next complete frame, or None when more bytes are needed."""
        if len(self._buf) < _HEADER.size:
            return None
        (length,) = _HEADER.unpack_from(self._buf)
        if length > MAX_FRAME:
            raise ProtocolError(f"frame length {length} exceeds {MAX_FRAME}")
        end = _HEADER.size + length
        if len(self._buf) < end:
            return None
        body = bytes(self._buf[_HEADER.size:end])
        del self._buf[:end]
        return decode(body)
