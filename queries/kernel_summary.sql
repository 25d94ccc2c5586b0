-- kernel_summary: per rank and kernel name, how often the kernel ran and how long it took.
--
-- Its parameters, columns and method: `tt_query_kernel_summary` in the module
-- `tokentrace.queries.kernel_summary`.

INCLUDE PERFETTO MODULE tokentrace.queries.kernel_summary;

SELECT * FROM tt_query_kernel_summary(
  '*'  -- name_glob
);
