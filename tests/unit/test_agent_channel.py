"""The service's side of the agent container's control channel, fed bytes directly: what PID 1
writes, and what an agent that reached the stream could write. Linear parsing, bounded
buffers, and every malformed stream an agent-caused error (graded), never an engine fault."""

from __future__ import annotations

import base64
import gzip
import socket
import struct
import tarfile
import threading

import pytest

from sandboxes.backend import AgentCausedSandboxFault
from sandboxes.control import CHUNK, AnswerParser, ChannelGarbled, _Conn, _Sink
from sandboxes.docker_adapter import MAX_FRAME, StreamCorrupt, take_frames
from sandboxes.docker_backend import _is_engine_error
from tests.resource_use import measured

NONCE = "0123456789abcdef"


def _answer(nonce: str, output: bytes, rc: int = 0, chunk: int = CHUNK) -> bytes:
    """An answer as PID 1 writes it."""
    encoded = base64.b64encode(output)
    parts = [f"@@rollouts {nonce} begin 1\n".encode()]
    for i in range(0, len(encoded), chunk):
        piece = encoded[i : i + chunk]
        parts.append(b"%x:" % len(piece) + piece)
    parts.append(f"@@rollouts {nonce} end {rc} 0\n".encode())
    return b"".join(parts)


def _events(data: bytes, step: int) -> list[tuple]:
    parser, events = AnswerParser(), []
    for i in range(0, len(data), step):
        parser.feed(data[i : i + step])
        while (e := parser.next_event()) is not None:
            events.append((e.kind, e.nonce, e.data, e.exit_code))
    return events


def _collapse(events: list[tuple]) -> list[tuple]:
    """Data events merged: how the stream is cut into reads must not matter."""
    out: list[tuple] = []
    for e in events:
        if e[0] == "data" and out and out[-1][0] == "data":
            out[-1] = ("data", e[1], out[-1][2] + e[2], 0)
        else:
            out.append(e)
    return out


def test_answers_parse_the_same_however_the_stream_is_cut() -> None:
    stale = _answer("fedcba9876543210", b"late output of an abandoned request", rc=1)
    ours = _answer(NONCE, bytes(range(256)) * 40, rc=3)
    stream = stale + ours
    whole = _collapse(_events(stream, len(stream)))
    assert [e[0] for e in whole] == ["begin", "data", "end", "begin", "data", "end"]
    assert base64.b64decode(whole[4][2]) == bytes(range(256)) * 40 and whole[5][3] == 3
    for step in (1, 2, 3, 5, 4001, 4005):
        assert _collapse(_events(stream, step)) == whole


def test_a_flood_without_a_newline_is_refused_at_once() -> None:
    """The landed reader buffered everything after `\\n@@rollouts ` until a newline and
    rescanned it per read (quadratic; 348 MB and 7 s of CPU for 128 MiB)."""
    parser = AnswerParser()
    parser.feed(_answer(NONCE, b"x")[:-1])  # an answer, then the flood where its end goes
    flood = b"\n@@rollouts " + b"A" * (1 << 20)
    with pytest.raises(ChannelGarbled):
        for i in range(0, len(flood), 1 << 16):
            parser.feed(flood[i : i + (1 << 16)])
            while parser.next_event() is not None:
                pass
    assert isinstance(ChannelGarbled("x"), AgentCausedSandboxFault)


@pytest.mark.parametrize(
    "junk",
    [
        b"@@rollouts 0123456789abcdef begin 1\n10001:" + b"A" * 10,  # a chunk over CHUNK
        b"zz:AAAA",  # not a length
        b"5:AAAAA",  # data outside any answer
        b"@@rollouts 0123456789abcdef end 0 0\n",  # an end without its begin
        b"@@rollouts 0123456789abcdef begin 1\n@@rollouts 1111111111111111 begin 1\n",
    ],
)
def test_anything_off_the_wire_format_is_garbled(junk: bytes) -> None:
    parser = AnswerParser()
    parser.feed(junk)
    with pytest.raises(ChannelGarbled):
        while parser.next_event() is not None:
            pass


def test_the_parser_holds_at_most_one_read_and_a_line() -> None:
    parser, longest = AnswerParser(), 0
    stream = _answer(NONCE, b"\xff" * (8 << 20))
    for i in range(0, len(stream), 1 << 16):
        parser.feed(stream[i : i + (1 << 16)])
        while parser.next_event() is not None:
            pass
        longest = max(longest, len(parser._buf))
    assert longest <= 80


def test_output_split_off_quanta_decodes_exactly() -> None:
    sink = _Sink(max_output=1 << 20, collect=1 << 20)
    data = bytes(range(256)) * 7
    encoded = base64.b64encode(data)
    for i in range(0, len(encoded), 7):
        sink.add(encoded[i : i + 7])
    assert sink.raw() == data


def _frame(payload: bytes, stream: int = 1) -> bytes:
    return struct.pack(">BxxxL", stream, len(payload)) + payload


def test_engine_frames_are_capped() -> None:
    buf = bytearray(_frame(b"ok") + struct.pack(">BxxxL", 1, MAX_FRAME + 1))
    with pytest.raises(StreamCorrupt):
        take_frames(buf)
    with pytest.raises(StreamCorrupt):
        take_frames(bytearray(_frame(b"x", stream=7)))
    assert take_frames(bytearray(_frame(b"ok") + b"\1\0\0")) == [(1, b"ok")]
    assert _is_engine_error(StreamCorrupt("x"))  # the engine's framing: masked


def test_a_flood_on_a_real_socket_costs_the_reader_little() -> None:
    """`_Conn` over a socket pair standing in for the attach stream: an answer begins, then
    the agent writes `\\n@@rollouts ` and 128 MiB without a newline into PID 1's stdout. The
    reader gives up at once (graded), whatever follows, holding almost nothing."""
    service, engine = socket.socketpair()
    conn = _Conn(service)
    stop = threading.Event()

    def pid1() -> None:
        engine.recv(1 << 16)  # the request
        engine.sendall(_frame(f"@@rollouts {NONCE} begin 1\n4:QUFB".encode()))
        engine.sendall(_frame(b"A\n@@rollouts "))
        block = _frame(b"A" * (1 << 20))
        try:
            for _ in range(128):
                if stop.is_set():
                    return
                engine.sendall(block)
        except OSError:
            pass  # the reader has gone

    writer = threading.Thread(target=pid1, daemon=True)
    writer.start()
    with measured() as use, pytest.raises(ChannelGarbled):
        conn.exchange(b"request\n", NONCE, 60.0, 1 << 16, None)
    stop.set()
    conn.close()
    engine.close()
    writer.join(timeout=30)
    assert use.rss_growth < 32 << 20 and use.cpu_s < 2.0, use
    # The stream is not trusted after that: every later request fails the same way.
    with pytest.raises(ChannelGarbled):
        conn.exchange(b"request\n", NONCE, 1.0, 1 << 16, None)


def test_parse_errors_of_container_bytes_are_never_engine_faults() -> None:
    """A gzip that breaks mid-way raised BadGzipFile, an OSError, and an OSError was taken for
    the engine's: masked. Only socket errors (an errno) and ConnectionErrors are the engine's."""
    with pytest.raises(OSError) as broken:  # a gzip member, then one that breaks
        gzip.decompress(gzip.compress(b"x") + b"\x1f\x8bXXXXXXXXXXXX")
    assert not _is_engine_error(broken.value)
    assert not _is_engine_error(gzip.BadGzipFile("Not a gzipped file"))
    assert not _is_engine_error(tarfile.ReadError("bad"))
    assert not _is_engine_error(TimeoutError())
    assert _is_engine_error(ConnectionResetError("the attach stream ended"))
    assert _is_engine_error(OSError(104, "Connection reset by peer"))
