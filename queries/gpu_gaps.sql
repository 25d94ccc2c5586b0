-- gpu_gaps: when did each rank's GPU sit idle, and was the host late to launch the next kernel?
--
-- Its parameters, columns and method: `tt_query_gpu_gaps` in the module
-- `tokentrace.queries.gpu_gaps`.

INCLUDE PERFETTO MODULE tokentrace.queries.gpu_gaps;

SELECT * FROM tt_query_gpu_gaps(
  tt_default_min_gap_ns(),  -- min_gap_ns
  10000,  -- launch_overhead_ns
  10,  -- startup_kernels
  ''  -- rank
);
