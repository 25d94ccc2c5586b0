"""The one exception family of tokentrace.

Every error a user can cause derives from :class:`TokentraceError`; its message says what went
wrong, where (file, line or event) and what to do. The command line prints that message on one
line and exits with status 1; anything else escaping is a bug.
"""


class TokentraceError(Exception):
    """Base class: a problem with the user's input or environment, explained in the message."""


class InputError(TokentraceError):
    """A trace file is missing, unreadable, of the wrong kind, truncated or still being written."""


class WriteError(InputError):
    """An output or cache file cannot be written (the disk is full, a quota, a file-size limit,
    a read-only file system, no permission): the message names the file written, never an
    input, and says what to do.

    Built from plain values (``args``), so it pickles and :func:`detached` copies it whole: a
    merge worker or forked child sends it back with its meaning (:attr:`errno`, :attr:`path`).

    Attributes:
        path: the file that was being written.
        errno: the failed call's errno (0 when unknown).
        reason: the system's words for it (``No space left on device``).
        hint: what the file system's state is and what to do (may be empty).
    """

    def __init__(self, path: str, errno: int, reason: str, hint: str = "") -> None:
        super().__init__(str(path), errno, reason, hint)
        self.path, self.errno, self.reason, self.hint = str(path), errno, reason, hint

    def __str__(self) -> str:
        return f"{self.path}: cannot write ({self.reason})" + (f"; {self.hint}" if self.hint else "")


class DiscoveryError(TokentraceError):
    """Files in a profile folder cannot be paired unambiguously into ranks."""


class AlignmentError(TokentraceError):
    """The clocks of a rank's two traces cannot be aligned (no anchor, too little evidence)."""


class EngineError(TokentraceError):
    """Perfetto's trace processor failed: trap, memory ceiling, corrupt trace, unreachable server."""


class QueryError(TokentraceError):
    """A query is unknown, its SQL fails, or a parameter is missing or ill-typed."""


def detached(exc: TokentraceError) -> TokentraceError:
    """A copy of ``exc`` with its message alone: no cause, context or traceback. What a worker
    process sends back: a context can hold objects no pickler takes (wasmtime's ctypes
    pointers), and tblib's pickling support, which Dask installs in every process that starts a
    cluster, pickles the context too (the pool's result then fails to pickle, and the pool
    breaks instead of raising the error)."""
    return type(exc)(*exc.args)


class TokentraceWarning(UserWarning):
    """Something the user should know that does not stop the work (overflow, estimated offset,
    Perfetto stats errors). Library code emits it with :func:`warnings.warn`; the command line
    collects these and prints each once, at the end."""
