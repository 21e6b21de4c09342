"""Background subagents (reflection, compaction) that work in their own memory worktrees."""

from subagents.compaction import CompactionResult, CompactionSubagent

__all__ = ["CompactionResult", "CompactionSubagent"]
