"""reverie: an async multi-agent orchestrator whose agents keep their memory in git.

Layers, lowest first: ``base`` (values) -> the I/O seams ``memfs``, ``store``, ``models``, ``tools``
-> ``compaction`` -> ``agent`` (one turn) -> ``runtime`` (process, supervisor) -> the top-level
``subagents`` package (plugins) -> the composition root ``app``, ``cli`` and ``batch``. This module
only names the version.
"""

__all__ = ["__version__"]

__version__ = "0.1.0"
