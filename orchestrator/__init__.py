"""reverie: an async multi-agent orchestrator whose agents keep their memory in git.

The runtime lives in subpackages, one concept each (``memfs``, ``models``, ``store``, ``tools``,
``compaction``, ``cli``); this top-level module only names the version.
"""

__all__ = ["__version__"]

__version__ = "0.1.0"
