"""The agent core: one turn of one agent, above the I/O seams (memfs, store, models, tools).

``turn`` runs the tool loop; ``prompt_cache`` decides which compiled system prompt a request uses;
``reminders`` holds every byte-exact reminder text; ``memory_sync`` is the post-turn git sync and
audit; ``skills`` reads ``<available_skills>`` from the committed memory. Nothing here knows about
subagents or the command line.
"""

__all__: list[str] = []
