"""tokentrace: why do your GPUs sit idle?

Merge each rank's VizTracer (host) and Triton Proton (GPU) traces onto one Perfetto timeline,
query it with Perfetto's TraceProcessor (embedded WebAssembly build, no network), and find the
host stalls behind GPU gaps.

In a notebook::

    import tokentrace
    with tokentrace.open("profile_folder") as trace:
        trace.gpu_gaps()

    change = tokentrace.diff("profile_before", "profile_after")   # DataFrames and a verdict

Recording (VizTracer and the torch profiler or Proton, named as ``analyze`` expects)::

    with tokentrace.record("profiles/run1", gpu="torch", skip=10, steps=50):
        for batch in requests:
            serve(batch)
            tokentrace.step()
"""


__all__ = ["__version__", "diff", "open", "record", "step"]


def __getattr__(name: str):
    # Lazy: `import tokentrace` (the CLI, the merge) must not pay for pandas and the engine.
    if name == "open":
        from tokentrace.notebook import open_analysis
        return open_analysis
    if name == "diff":  # a callable package: tokentrace.diff(before, after)
        import tokentrace.diff
        return tokentrace.diff
    if name == "record":  # a callable package, as diff; it imports no profiler (a window's start does)
        import tokentrace.record
        return tokentrace.record
    if name == "step":
        from tokentrace.record import step
        globals()["step"] = step  # called once per step: found directly from now on
        return step
    if name == "__version__":
        from tokentrace.version import tool_version
        return tool_version()
    raise AttributeError(f"module 'tokentrace' has no attribute {name!r}")
