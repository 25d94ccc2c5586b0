-- idle_budget: where did each rank's GPU idle time go? One row per rank and category; the
-- categories add up to the rank's idle time inside its active window (`gpu_windows.idle_ns`).
--
-- Its parameters, columns and method: `tt_query_idle_budget` in the module
-- `tokentrace.queries.idle_budget`.

INCLUDE PERFETTO MODULE tokentrace.queries.idle_budget;

SELECT * FROM tt_query_idle_budget(
  tt_default_min_gap_ns(),  -- min_gap_ns
  10000,  -- launch_overhead_ns
  10,  -- startup_kernels
  '',  -- step_name
  ''  -- rank
);
