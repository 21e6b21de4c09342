"""Background subagents (reflection, compaction, the merge resolver) that work in their own memory
worktrees. The composition root (``orchestrator.app.session``) installs them through the runtime's
plugin interfaces (``orchestrator.runtime.plugins``); this package names none of them itself."""

__all__: list[str] = []
