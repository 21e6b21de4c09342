"""The composition root: the code that wires the layers together for a user.

``session`` builds a chat session (runtime, supervisor, reflection and compaction subagents);
``demo`` is what ``make demo`` runs; ``stress`` is ``reverie stress``'s concurrent-writer harness. The
command line (``orchestrator.cli``) and batch runs (``orchestrator.batch``) sit beside this package.
"""

__all__: list[str] = []
