-- gpu_busy: per rank, how the GPU's busy time inside its active window splits into compute,
-- communication (NCCL) and memory copies / sets.
--
-- Its parameters, columns and method: `tt_query_gpu_busy` in the module
-- `tokentrace.queries.gpu_busy`.

INCLUDE PERFETTO MODULE tokentrace.queries.gpu_busy;

SELECT * FROM tt_query_gpu_busy(
  ''  -- rank
);
