"""Background subagents (reflection, compaction) that work in their own memory worktrees."""

__all__: list[str] = []
