"""DockerAdapter's attach and exec streams, over a real socket pair standing for the engine."""

from __future__ import annotations

import socket
import struct

from sandboxes.docker_adapter import DockerAdapter
from sandboxes.docker_streams import _ExecStream


def _frame(stream_id: int, payload: bytes) -> bytes:
    return struct.pack(">BxxxL", stream_id, len(payload)) + payload


async def test_what_a_process_wrote_before_it_stopped_taking_its_input_is_read():
    """The process wrote a line and ended while its input was still being sent (a verifier
    container that died during the upload): the send fails, and the stream is still read to
    its end, so the caller judges by what the process wrote, not by the failed send."""
    ours, engine = socket.socketpair()
    engine.sendall(_frame(1, b"rollouts-began abc\n") + _frame(2, b"bye\n"))
    engine.close()
    adapter = DockerAdapter()
    try:
        result, cut = await adapter._pump(
            _ExecStream(ours), b"x" * (4 << 20), 1 << 10, 1 << 10, timeout_s=30
        )
    finally:
        adapter.close()
    assert not cut
    assert result.stdout_raw == b"rollouts-began abc\n"
    assert result.output.text() == "bye\n"
