"""The conversation store: agents, conversations, the durable transcript and the in-context list, the
compiled system prompt per conversation, reminder state, turns, events and transcript search, in one
SQLite file (WAL, busy timeout, foreign keys), each connection pinned to one of a few shared lane
threads (D8, relaxing S26; see ``worker``). Nothing here blocks the event loop; it runs on
trio and asyncio. One module per concept behind the ``Store`` facade: ``conversations``,
``transcript`` (with the in-context cache), ``prompts``, ``reminder_queue``, ``events``, ``turns``,
``search``, ``reflections``; ``jobs`` holds what they share.

The turn loop makes these calls through ``turn_jobs``'s composites (``open_turn``, ``close_turn``)
and staged events, three jobs for a plain turn; the sequence below is what they do, and each call
stays available on its own. Intended call sequence of one turn (TURN-1.2), ``store`` being
an open ``Store``::

    conv = await store.latest_conversation(agent_id) or await store.create_conversation(agent_id)
    turn_id = await store.begin_turn(conv.id)
    # one-shot reminders: queued only if not already sent (state survives restarts, T4)
    await store.enqueue_reminder(conv.id, "agent-info", text, priority=0, once=True)
    # (1)+(2)+(3) pending reminders (agent-info, MEMORY COMMIT NEEDED, kept reflections...) become one
    # kind="reminder" message, followed by the user's message, all in one transaction (T2, S15)
    await store.deliver_reminders(conv.id, followed_by=[user_msg], turn_id=turn_id)
    loop:
        row = await store.get_prompt(conv.id)                      # resolve the prompt (TURN-2.6)
        # rows 1/3: await store.set_prompt(record)
        # row 4:  await store.append_message(conv.id, update_msg, turn_id=turn_id,
        #            metadata={"memfs_revision": r, "previous_memfs_revision": old}, prompt=moved_row)
        #        (update_msg.kind == "memory_update"; message and prompt row in one transaction)
        history = await store.in_context(conv.id)
        response = await model.complete(...)
        await store.mark_prompt_sent(conv.id)
        await store.append_message(conv.id, response.message, turn_id=turn_id)
        await store.append_messages(conv.id, tool_results, turn_id=turn_id)
        # compaction: await store.replace_in_context(conv.id, summary, keep_ids,
        #     metadata={"compaction": {...}}, prompt=recompiled, rearm=["agent-info"])
    await store.end_turn(turn_id, "end_turn")                       # or "error" / "interrupted" / ...
    # post-turn sync (shielded): await store.enqueue_reminder(conv.id, "memory-git-sync", text, priority=50)
    #   or await store.cancel_reminder(conv.id, "memory-git-sync") once the repository is clean
    await store.record_event("compaction.done", {...}, agent_id=..., conversation_id=conv.id)

A process killed mid-turn leaves its turn ``running``; the next ``Store.open`` marks it ``interrupted``.
"""

from orchestrator.store.records import (
    Agent,
    Conversation,
    ConversationSummary,
    Event,
    PendingReminder,
    PromptRecord,
    SearchHit,
    StoredMessage,
    StoreError,
    Turn,
    TurnStatus,
    format_time,
    utc_now,
)
from orchestrator.store.reflections import ReflectionRecord, ReflectionState
from orchestrator.store.reminder_queue import reminder_message
from orchestrator.store.store import LIKE_SCAN_MESSAGES, REMINDER_QUEUE_LIMIT, Store
from orchestrator.store.turn_jobs import OpenedTurn, SyncReminder, new_turn_id

__all__ = [
    "LIKE_SCAN_MESSAGES",
    "REMINDER_QUEUE_LIMIT",
    "Agent",
    "Conversation",
    "ConversationSummary",
    "Event",
    "OpenedTurn",
    "PendingReminder",
    "PromptRecord",
    "ReflectionRecord",
    "ReflectionState",
    "SearchHit",
    "Store",
    "StoreError",
    "StoredMessage",
    "SyncReminder",
    "Turn",
    "TurnStatus",
    "format_time",
    "new_turn_id",
    "reminder_message",
    "utc_now",
]
