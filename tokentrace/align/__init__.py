"""Clock offsets between a rank's host and GPU traces.

:mod:`.estimate` and :mod:`.bounds` estimate an offset and its provable interval from the traces
alone (pure functions of host calls and kernels); :mod:`.policy` decides per rank between the
anchors, the user's offset and the estimate, and says so in warnings.
"""
