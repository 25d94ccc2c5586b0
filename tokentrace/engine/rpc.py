"""Perfetto's RPC client, completed with the requests that load a trace and register SQL.

The ``perfetto`` package's :class:`TraceProcessorRpc` speaks the byte protocol of
``remote_trace_processor.cc`` over any transport but implements queries only. Loading
(``TPM_APPEND_TRACE_DATA`` + ``TPM_FINALIZE_TRACE_DATA``) and ``TPM_REGISTER_SQL_PACKAGE`` are
one request and one reply each, added here on top of its framing.
"""

from __future__ import annotations

from perfetto.trace_processor.rpc import TraceProcessorRpc


class LoadingRpc(TraceProcessorRpc):
    """:class:`TraceProcessorRpc` that can also load a trace and register SQL packages."""

    def _call(self, method: str, fill=None):
        """Sends one request, returns its (single) reply message."""
        stream = self.protos.TraceProcessorRpcStream()
        request = stream.msg.add()
        request.request = getattr(self.protos.TraceProcessorRpc, method)
        if fill is not None:
            fill(request)
        self.transport.send(stream.SerializeToString())
        reply = self.protos.TraceProcessorRpc()
        reply.MergeFromString(self._read_payload())
        self._check_envelope(reply)
        return reply

    def parse(self, chunk: bytes):
        """Appends a chunk of trace bytes; returns ``AppendTraceDataResult`` (``error`` set on
        a parse failure)."""
        def fill(request):
            request.append_trace_data = bytes(chunk)
        return self._call("TPM_APPEND_TRACE_DATA", fill).append_result

    def notify_eof(self):
        """Ends the trace: the processor sorts and finishes import; returns its status text."""
        return self._call("TPM_FINALIZE_TRACE_DATA").finalize_data_result

    def register_sql_package(self, name: str, modules: dict[str, str]) -> str:
        """Registers PerfettoSQL modules (``{"pkg.mod": sql}``); returns an error text or ''."""
        def fill(request):
            args = request.register_sql_package_args
            args.package_name = name
            args.allow_override = True
            for module_name, sql in sorted(modules.items()):
                module = args.modules.add()
                module.name = module_name
                module.sql = sql
        return self._call("TPM_REGISTER_SQL_PACKAGE", fill).register_sql_package_result.error
