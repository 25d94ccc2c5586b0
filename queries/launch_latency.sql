-- launch_latency: per rank and kernel name, how long after its launch each kernel started.
--
-- Its parameters, columns and method: `tt_query_launch_latency` in the module
-- `tokentrace.queries.launch_latency`.

INCLUDE PERFETTO MODULE tokentrace.queries.launch_latency;

SELECT * FROM tt_query_launch_latency(
  '*'  -- name_glob
);
