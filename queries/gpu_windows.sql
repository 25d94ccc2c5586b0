-- gpu_windows: per rank, the GPU's active window and how its idle time splits.
--
-- Its parameters, columns and method: `tt_query_gpu_windows` in the module
-- `tokentrace.queries.gpu_windows`.

INCLUDE PERFETTO MODULE tokentrace.queries.gpu_windows;

SELECT * FROM tt_query_gpu_windows(
  tt_default_min_gap_ns(),  -- min_gap_ns
  10000,  -- launch_overhead_ns
  10,  -- startup_kernels
  ''  -- rank
);
