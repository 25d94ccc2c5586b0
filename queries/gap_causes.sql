-- gap_causes: which host function caused each GPU gap, and which gaps are stalls?
--
-- Its parameters, columns and method: `tt_query_gap_causes` in the module
-- `tokentrace.queries.gap_causes`.

INCLUDE PERFETTO MODULE tokentrace.queries.gap_causes;

SELECT * FROM tt_query_gap_causes(
  tt_default_min_gap_ns(),  -- min_gap_ns
  10000,  -- launch_overhead_ns
  10,  -- startup_kernels
  2000000,  -- stall_min_ns
  ''  -- rank
);
