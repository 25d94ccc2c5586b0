"""Recording: VizTracer and a GPU profiler over a window of the program, written as the files
``tokentrace analyze`` reads (docs/record.md).

``with tokentrace.record("profiles/run1", gpu="torch"): serve()`` in the program, or
``tokentrace record -o profiles/run1 -- python serve.py`` around it; :func:`step` marks bound the
window (``skip=``, ``steps=``). torch, triton and viztracer are imported only when a window
starts: importing this package imports none of them.

:mod:`.options` checks what is asked, :mod:`.names` names the files, :mod:`.host` runs VizTracer,
:mod:`.gpu` the torch profiler or Proton, :mod:`.session` the window and the order of calls,
:mod:`.command` and :mod:`.run` the command line's wrapper. ``tokentrace.record(...)`` calls
:func:`record`: this package is callable, so the name works whether Python resolves it to the
package or to the function.
"""

import sys
import types

from tokentrace.record.options import RecordError, RecordOptions
from tokentrace.record.session import Recording, record, step

__all__ = ["RecordError", "RecordOptions", "Recording", "record", "step"]


class _CallablePackage(types.ModuleType):
    """``tokentrace.record(out, ...)``: the package called is :func:`record` called."""

    def __call__(self, *args, **kwargs):
        return record(*args, **kwargs)


sys.modules[__name__].__class__ = _CallablePackage
