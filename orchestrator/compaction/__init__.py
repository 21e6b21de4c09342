"""compaction"""

__all__: list[str] = []
