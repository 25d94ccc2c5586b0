-- step_breakdown: per scheduler step and rank, how long the step took, how much of it the GPU was
-- busy, and the idle time split by gap class.
--
-- Its parameters, columns and method: `tt_query_step_breakdown` in the module
-- `tokentrace.queries.step_breakdown`.

INCLUDE PERFETTO MODULE tokentrace.queries.step_breakdown;

SELECT * FROM tt_query_step_breakdown(
  '',  -- step_name
  tt_default_min_gap_ns(),  -- min_gap_ns
  10000  -- launch_overhead_ns
);
