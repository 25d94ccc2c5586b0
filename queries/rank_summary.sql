-- rank_summary: per rank, the top stall cause, the shorter host gaps and the cost per step.
--
-- Its parameters, columns and method: `tt_query_rank_summary` in the module
-- `tokentrace.queries.rank_summary`.

INCLUDE PERFETTO MODULE tokentrace.queries.rank_summary;

SELECT * FROM tt_query_rank_summary(
  tt_default_min_gap_ns(),  -- min_gap_ns
  10000,  -- launch_overhead_ns
  10,  -- startup_kernels
  2000000,  -- stall_min_ns
  '',  -- step_name
  ''  -- rank
);
