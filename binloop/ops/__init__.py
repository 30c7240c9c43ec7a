"""Running the live job: processes, clusters, recovery, metrics and status.

- ``cluster``, ``cluster_spec``: a flow as a cluster of processes; which process this is.
- ``memory_tuning``: the garbage collector's and malloc's settings of a dataflow process.
- ``thread_state``: Bytewax's worker threads keep their Python thread state.
- ``recovery_store``: the Bytewax recovery store, created once.
- ``metrics``, ``operations``: Prometheus metrics and what a run process serves beside the flow.
- ``shutdown``: the process-wide stop request (SIGINT/SIGTERM) every source reads.
- ``job_status``, ``status_report``: the job's status in NATS KV; what ``binloop status`` reads.
"""
