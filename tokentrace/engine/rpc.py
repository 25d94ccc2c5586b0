"""Our client of the trace processor RPC protocol: framing, queries, loading, SQL packages.

The protocol is the one of Perfetto's ``src/trace_processor/rpc/rpc.cc``: a request is a
serialized ``TraceProcessorRpcStream`` holding one ``TraceProcessorRpc``; the reply is a stream
of ``TraceProcessorRpc`` messages, each framed as field 1 of that stream (tag ``0x0A``, varint
length, payload). A query answers one message per batch, the last flagged ``is_last_batch``;
every other request answers exactly one message.

Written here instead of subclassing the ``perfetto`` package's own client class (module
``perfetto.trace_processor.rpc``): it is not exported, implements queries only, and completing it
meant calling its private methods, which any release may rename. What we take from the package
is public: the message classes of :class:`~perfetto.trace_processor.protos.ProtoFactory`.

A transport has ``send(data)``, ``read(size)`` (exactly ``size`` bytes, or raise) and ``close()``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping

from tokentrace.errors import EngineError

TAG = 0x0A  # field 1 (TraceProcessorRpcStream.msg), wire type 2: (1 << 3) | 2
_MAX_VARINT_BYTES = 10  # a uint64 needs at most 10 groups of 7 bits
_LENGTH_DELIMITED = 2  # the wire type of bytes fields


@functools.cache
def default_protos():
    """The ``perfetto`` package's message classes, built once per process (parsing its
    descriptors again for every trace opened would cost ~4 ms each time)."""
    from perfetto.trace_processor.platform import PlatformDelegate
    from perfetto.trace_processor.protos import ProtoFactory
    return ProtoFactory(PlatformDelegate())


def encode_varint(value: int) -> bytes:
    """Protobuf base-128 varint: 7 bits per byte, least significant group first."""
    if value < 0:
        raise ValueError("a frame length cannot be negative")
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)  # high bit set: more bytes follow
        value >>= 7
    out.append(value)
    return bytes(out)


def frame(payload: bytes) -> bytes:
    """One serialized ``TraceProcessorRpc`` as an element of a ``TraceProcessorRpcStream``."""
    return b"".join((bytes((TAG,)), encode_varint(len(payload)), payload))


def append_request_head(protos, size: int) -> bytes:
    """The bytes before ``size`` bytes of trace data in a framed ``TPM_APPEND_TRACE_DATA``
    request: what framing the serialized ``TraceProcessorRpc`` (``request`` set, then
    ``append_trace_data``, as protobuf writes fields in number order) puts before the data."""
    message = protos.TraceProcessorRpc
    fields = message.DESCRIPTOR.fields_by_name
    request = encode_varint(fields["request"].number << 3) + encode_varint(message.TPM_APPEND_TRACE_DATA)
    data = encode_varint(fields["append_trace_data"].number << 3 | _LENGTH_DELIMITED) + encode_varint(size)
    return bytes((TAG,)) + encode_varint(len(request) + len(data) + size) + request + data


def read_frame(read: Callable[[int], bytes]) -> bytes:
    """Reads the next framed message with ``read(size)``; returns its payload, still serialized.

    Raises:
        EngineError: the stream holds something else than a frame (a protocol mismatch).
    """
    tag = read(1)[0]
    if tag != TAG:
        raise EngineError(f"unexpected byte {tag:#04x} in the trace processor's reply stream "
                          "(not a TraceProcessorRpcStream; is this a trace processor?)")
    length = shift = 0
    for _ in range(_MAX_VARINT_BYTES):
        byte = read(1)[0]
        length |= (byte & 0x7F) << shift
        if not byte & 0x80:  # the last byte of a varint has its high bit clear
            return read(length) if length else b""
        shift += 7
    raise EngineError("malformed frame length in the trace processor's reply stream")


class ReplyBuffer:
    """Reply bytes received but not yet read, handed out in order by :meth:`take`."""

    def __init__(self) -> None:
        self._data = bytearray()
        self._pos = 0

    def append(self, data) -> None:
        """Adds bytes at the end."""
        self._data += data

    def available(self) -> int:
        """How many bytes :meth:`take` can hand out."""
        return len(self._data) - self._pos

    def take(self, size: int) -> bytes:
        """The next ``size`` bytes (the caller checked :meth:`available`)."""
        end = self._pos + size
        data = bytes(self._data[self._pos:end])
        self._pos = end
        if self._pos == len(self._data):  # all read: start over instead of growing forever
            self.clear()
        return data

    def clear(self) -> None:
        """Drops everything unread."""
        self._data = bytearray()
        self._pos = 0


class RpcClient:
    """The engine's client over any transport: ``execute_query``, ``parse``, ``notify_eof``,
    ``register_sql_package``, ``close``.

    Args:
        transport: ``send``/``read``/``close``, see the module docstring.
        protos: a ``ProtoFactory`` (default: :func:`default_protos`).
    """

    def __init__(self, transport, protos=None):
        self.transport = transport
        self.protos = protos or default_protos()

    def execute_query(self, sql: str):
        """Runs ``sql``; returns one ``QueryResult`` holding every batch (``error`` set on a
        SQL failure)."""
        def fill(request):
            request.query_args.sql_query = sql
        self._send("TPM_QUERY_STREAMING", fill)
        # Merging each message into one keeps appending batches (repeated field) while the
        # column names, sent once, stay: the shape a whole-result reply would have.
        message = self.protos.TraceProcessorRpc()
        while True:
            message.MergeFromString(read_frame(self.transport.read))
            self._raise_for_error_reply(message)
            result = message.query_result
            if result.batch and result.batch[-1].is_last_batch:
                return result

    def parse(self, chunk: bytes | bytearray | memoryview):
        """Appends a chunk of trace bytes; returns ``AppendTraceDataResult`` (``error`` set on
        a parse failure).

        The request is framed here (:func:`append_request_head`), not by the message class:
        setting the field, serializing and framing would copy the chunk three times more (0.1 s
        of a 60 MB load). A transport with ``send_parts(head, chunk)`` takes both pieces as they
        are; any other gets them joined.
        """
        head = append_request_head(self.protos, len(chunk))
        send_parts = getattr(self.transport, "send_parts", None)
        if send_parts is not None:
            send_parts(head, chunk)
        else:
            self.transport.send(head + bytes(chunk))
        return self._reply().append_result

    def notify_eof(self):
        """Ends the trace: Perfetto sorts and finishes the import; returns ``FinalizeDataResult``
        (``error`` set for a truncated JSON or gzip stream)."""
        return self._call("TPM_FINALIZE_TRACE_DATA").finalize_data_result

    def register_sql_package(self, name: str, modules: Mapping[str, str],
                             allow_override: bool = False) -> str:
        """Registers PerfettoSQL modules (``{"pkg.mod": sql}``) as package ``name``; returns
        Perfetto's error text, or ''.

        Args:
            name: the package name.
            modules: module name -> SQL text.
            allow_override: replace a package of that name already registered (Perfetto then
                forgets which of its modules were included, and including one again fails on
                the tables it created the first time).
        """
        def fill(request):
            args = request.register_sql_package_args
            args.package_name = name
            args.allow_override = allow_override
            for module_name, sql in sorted(modules.items()):
                module = args.modules.add()
                module.name = module_name
                module.sql = sql
        return self._call("TPM_REGISTER_SQL_PACKAGE", fill).register_sql_package_result.error

    def close(self) -> None:
        """Closes the transport."""
        self.transport.close()

    # -- protocol ---------------------------------------------------------------------------
    def _send(self, method: str, fill=None) -> None:
        request = self.protos.TraceProcessorRpc()
        request.request = getattr(self.protos.TraceProcessorRpc, method)
        if fill is not None:
            fill(request)
        self.transport.send(frame(request.SerializeToString()))

    def _call(self, method: str, fill=None):
        """Sends one request, returns its single reply message."""
        self._send(method, fill)
        return self._reply()

    def _reply(self):
        """The single reply message of the request just sent."""
        reply = self.protos.TraceProcessorRpc()
        reply.MergeFromString(read_frame(self.transport.read))
        self._raise_for_error_reply(reply)
        return reply

    def _raise_for_error_reply(self, message) -> None:
        """Raises for a reply that is an error instead of a result (as Perfetto's own
        ``CheckRpcEnvelope`` does); otherwise an unsupported request would wait forever."""
        if message.HasField("fatal_error"):
            raise EngineError(f"the trace processor ended the session: {message.fatal_error}")
        if message.HasField("invalid_request"):
            method = self.protos.TraceProcessorRpc.TraceProcessorMethod.Name(message.invalid_request)
            raise EngineError(f"this trace processor does not support {method} (an older "
                              "Perfetto release?)")
