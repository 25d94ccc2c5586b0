"""The one place that knows about processes: forks and worker pools (:mod:`.processes`),
signals (:mod:`.signals`), the lifecycle of a command (:mod:`.command`), writes that are all or
nothing (:mod:`.files`, :mod:`.journal`) and the cores this process may use (:mod:`.cores`).

No module outside this package forks, handles or blocks signals, freezes or pauses the cyclic
collector, or imports ``multiprocessing`` or ``concurrent.futures`` (tests/runtime/test_process_home.py, and an import-linter contract).
Nothing is imported here: ``import tokentrace.runtime.files`` must not pay for a process pool.
"""
