"""The runtime: one ``Runtime`` per process (settings, store, model) and the ``Supervisor`` that owns
every background task. Subagents plug in from above through the interfaces the supervisor declares;
nothing here imports ``subagents``.
"""

__all__: list[str] = []
