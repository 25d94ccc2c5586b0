"""Our RPC client without a trace processor: framing, batch merging, error envelopes."""

from __future__ import annotations

import pytest

from tokentrace.engine.rpc import (
    RpcClient,
    append_request_head,
    default_protos,
    encode_varint,
    frame,
    read_frame,
)
from tokentrace.errors import EngineError


class ScriptedTransport:
    """Answers every request with the same canned reply bytes; records what was sent."""

    def __init__(self, reply: bytes = b""):
        self.reply = reply
        self.sent: list[bytes] = []
        self._pending = b""

    def send(self, data: bytes) -> None:
        self.sent.append(data)
        self._pending = self.reply

    def read(self, size: int) -> bytes:
        if size > len(self._pending):
            raise ConnectionError("short")
        data, self._pending = self._pending[:size], self._pending[size:]
        return data

    def close(self) -> None:
        pass


def _reply(**fields) -> bytes:
    message = default_protos().TraceProcessorRpc(**fields)
    return frame(message.SerializeToString())


def test_varint_known_values():
    assert encode_varint(0) == b"\x00"
    assert encode_varint(127) == b"\x7f"
    assert encode_varint(128) == b"\x80\x01"
    assert encode_varint(300) == b"\xac\x02"
    with pytest.raises(ValueError):
        encode_varint(-1)


@pytest.mark.parametrize("size", [0, 1, 127, 128, 300, 16383, 16384, 2**21 + 3])
def test_frames_round_trip(size):
    payloads = [bytes([size % 251]) * size, b"after"]
    stream = ScriptedTransport(b"".join(frame(p) for p in payloads))
    stream.send(b"")
    assert [read_frame(stream.read) for _ in payloads] == payloads


def test_frame_is_what_protobuf_writes_for_a_stream():
    # Our framing must equal the serialization of TraceProcessorRpcStream{msg: [rpc]}, the
    # format Perfetto's server parses.
    protos = default_protos()
    rpc = protos.TraceProcessorRpc()
    rpc.request = protos.TraceProcessorRpc.TPM_QUERY_STREAMING
    rpc.query_args.sql_query = "SELECT 1" * 40  # past 127 bytes: a two-byte length
    stream = protos.TraceProcessorRpcStream()
    stream.msg.add().CopyFrom(rpc)
    assert frame(rpc.SerializeToString()) == stream.SerializeToString()


@pytest.mark.parametrize("size", [0, 1, 100, 127, 128, 16384, 16 * 1024 * 1024])
def test_append_request_is_what_protobuf_writes(size):
    # parse() frames the request itself around the chunk, unserialized; the bytes must be the
    # framed message the message class would write (request, then append_trace_data).
    protos = default_protos()
    chunk = bytes([size % 251]) * size
    rpc = protos.TraceProcessorRpc(request=protos.TraceProcessorRpc.TPM_APPEND_TRACE_DATA,
                                   append_trace_data=chunk)
    assert append_request_head(protos, size) + chunk == frame(rpc.SerializeToString())


def test_parse_sends_head_and_chunk_to_a_transport_of_parts():
    protos = default_protos()
    reply = _reply(response=protos.TraceProcessorRpc.TPM_APPEND_TRACE_DATA)

    class PartsTransport(ScriptedTransport):
        def send_parts(self, head, data):
            self.sent.append(bytes(head) + bytes(data))
            self._pending = self.reply

    chunk = bytearray(b'{"traceEvents": []}')
    for transport in (ScriptedTransport(reply), PartsTransport(reply)):
        RpcClient(transport, protos).parse(memoryview(chunk))
        assert transport.sent == [append_request_head(protos, len(chunk)) + chunk]


def test_bad_stream_is_an_engine_error():
    stream = ScriptedTransport(b"\x12\x00")
    stream.send(b"")
    with pytest.raises(EngineError, match="unexpected byte 0x12"):
        read_frame(stream.read)
    stream = ScriptedTransport(b"\x0a" + b"\xff" * 11)
    stream.send(b"")
    with pytest.raises(EngineError, match="malformed frame length"):
        read_frame(stream.read)


def test_query_batches_are_merged():
    protos = default_protos()
    first = protos.TraceProcessorRpc()
    first.query_result.column_names.append("x")
    first.query_result.batch.add(cells=[2], varint_cells=[7])
    last = protos.TraceProcessorRpc()
    last.query_result.batch.add(cells=[2], varint_cells=[8], is_last_batch=True)
    transport = ScriptedTransport(frame(first.SerializeToString()) + frame(last.SerializeToString()))
    result = RpcClient(transport).execute_query("SELECT x")
    assert list(result.column_names) == ["x"]
    assert [list(b.varint_cells) for b in result.batch] == [[7], [8]]
    sent = protos.TraceProcessorRpcStream()
    sent.MergeFromString(transport.sent[0])
    assert sent.msg[0].query_args.sql_query == "SELECT x"


def test_error_envelopes():
    protos = default_protos()
    unsupported = _reply(invalid_request=protos.TraceProcessorRpc.TPM_REGISTER_SQL_PACKAGE)
    with pytest.raises(EngineError, match="does not support TPM_REGISTER_SQL_PACKAGE"):
        RpcClient(ScriptedTransport(unsupported)).register_sql_package("p", {"p.m": "SELECT 1"})
    with pytest.raises(EngineError, match="ended the session: bad framing"):
        RpcClient(ScriptedTransport(_reply(fatal_error="bad framing"))).execute_query("SELECT 1")


def test_register_request_carries_every_module():
    protos = default_protos()
    transport = ScriptedTransport(_reply())
    error = RpcClient(transport).register_sql_package("p", {"p.b": "SELECT 2", "p.a": "SELECT 1"})
    assert error == ""
    sent = protos.TraceProcessorRpcStream()
    sent.MergeFromString(transport.sent[0])
    args = sent.msg[0].register_sql_package_args
    assert args.package_name == "p" and not args.allow_override
    assert [(m.name, m.sql) for m in args.modules] == [("p.a", "SELECT 1"), ("p.b", "SELECT 2")]
