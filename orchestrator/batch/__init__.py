"""Batch runs over task suites: suite format, per-task runner, executors, results, sweeps, charts
and the event log. Submodules are imported on use (Ray stays out of start-up)."""

__all__: list[str] = []
