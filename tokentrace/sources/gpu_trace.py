"""A rank's GPU side, whatever recorded it: Proton parts or one torch-profiler trace."""

from __future__ import annotations

from tokentrace.sources.discover import GpuFormat, RankFiles
from tokentrace.sources.proton import ProtonTrace, read_proton


def read_gpu_trace(files: RankFiles) -> ProtonTrace:
    """The rank's GPU trace, laid out as the merge lays out Proton (see
    :mod:`tokentrace.sources.kineto` for how a torch-profiler trace maps onto it), read as
    :func:`tokentrace.sources.backend.current` says.

    Raises:
        InputError: the file is missing, not JSON, truncated or of the wrong kind.
    """
    if files.gpu_format is GpuFormat.KINETO:
        from tokentrace.sources.kineto import read_kineto

        return read_kineto(files.gpu[0]).gpu
    return read_proton(files.gpu)
