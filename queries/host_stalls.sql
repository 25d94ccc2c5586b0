-- host_stalls: for each GPU gap, which Python frames of the launching host thread were running
-- during it, ranked by how much of the gap they own.
--
-- Its parameters, columns and method: `tt_query_host_stalls` in the module
-- `tokentrace.queries.host_stalls`.

INCLUDE PERFETTO MODULE tokentrace.queries.host_stalls;

SELECT * FROM tt_query_host_stalls(
  tt_default_min_gap_ns(),  -- min_gap_ns
  10000,  -- launch_overhead_ns
  10,  -- startup_kernels
  '',  -- rank
  5  -- top
);
