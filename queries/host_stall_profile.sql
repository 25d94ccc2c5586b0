-- host_stall_profile: which Python functions cost the most GPU idle time, summed over gaps.
--
-- Its parameters, columns and method: `tt_query_host_stall_profile` in the module
-- `tokentrace.queries.host_stall_profile`.

INCLUDE PERFETTO MODULE tokentrace.queries.host_stall_profile;

SELECT * FROM tt_query_host_stall_profile(
  tt_default_min_gap_ns(),  -- min_gap_ns
  0,  -- max_gap_ns
  10000,  -- launch_overhead_ns
  10,  -- startup_kernels
  FALSE,  -- include_startup
  FALSE,  -- host_only
  ''  -- rank
);
