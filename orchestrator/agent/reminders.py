"""Every byte-exact reminder text reverie sends to a model, and its formatting (S19).

Texts quoted from letta-code (TURN-3, TURN-4.4, TURN-7.2) are reproduced byte for byte;
reverie's own texts (S12) live beside them. Prompts for models live in ``prompts/``, not here.

Every value a template interpolates (file names, validator errors, git status, names the user set)
passes through ``markup.neutralise``: a structural tag in it (``</system-reminder>``) would otherwise
end the reminder and open text the model trusts (A7). The memory rendered into
``memory_update`` is the compiler's output, already neutralised where it came from memory.
The invalid-memory reminder is bounded: the first ``INVALID_SHOWN`` problems, each cut to
``INVALID_LINE_CHARS``, a count and the command that shows them all (item 8); a tree with 50,000
invalid files otherwise sent 3 MB on every turn.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Final

from orchestrator.memfs.frontmatter import js_trim_end
from orchestrator.memfs.markup import neutralise

__all__ = [
    "AGENT_INFO_TEMPLATE",
    "INVALID_LINE_CHARS",
    "INVALID_SHOWN",
    "MEMORY_INVALID_TEMPLATE",
    "MEMORY_UPDATE_TEMPLATE",
    "REFLECTION_KEPT_TEMPLATE",
    "SYNC_CONFLICT_TEMPLATE",
    "SYNC_DIRTY_TEMPLATE",
    "SYNC_PUSH_FAILED_TEMPLATE",
    "agent_info_reminder",
    "iso_utc",
    "join_reminders",
    "reflection_kept_reminder",
    "memory_invalid_reminder",
    "memory_update_block",
    "memory_update_reminder",
    "sync_reminder",
]

MEMORY_UPDATE_TEMPLATE = (
    "<memory_update>\n"
    "The local memory filesystem has been edited and committed at revision {revision}.\n"
    "This updates part of your persona/system memory. Treat the following freshly rendered memory "
    "context as authoritative from now on; where it conflicts with earlier memory context, this newer "
    "memory context wins.\n"
    "\n"
    "{core_memory}\n"
    "</memory_update>"
)

AGENT_INFO_TEMPLATE = (
    "<system-reminder> This is an automated message providing information about you.\n"
    "- **Agent ID (also stored in `AGENT_ID` env var)**: {agent_id}{conversation_line}{memory_dir_line}\n"
    "- **Agent name**: {agent_name} (the user can change this with /rename)\n"
    "- **Agent description**: {agent_description} (the user can change this with /description)\n"
    "- **Last message**: {last_message}\n"
    "</system-reminder>"
)
_CONVERSATION_LINE = "\n- **Conversation ID (also stored in `CONVERSATION_ID` env var)**: {conversation_id}"
_MEMORY_DIR_LINE = "\n- **Memory directory (also stored in `MEMORY_DIR` env var)**: `{memory_dir}`"

SYNC_CONFLICT_TEMPLATE = (
    "<system-reminder>\n"
    "MEMORY GIT CONFLICT: The memory repository needs manual conflict resolution.\n"
    "\n"
    "Memory directory: {memory_dir}\n"
    "Status: {summary}\n"
    "\n"
    "Resolve the merge/rebase conflicts in the memory repository, stage the resolved files, and complete "
    "the merge/rebase or create the needed commit. The harness will retry remote push after a future turn "
    "when the repo is clean.\n"
    "</system-reminder>"
)

SYNC_DIRTY_TEMPLATE = (
    "<system-reminder>\n"
    "MEMORY COMMIT NEEDED: The memory repository has uncommitted changes.\n"
    "\n"
    "Memory directory: {memory_dir}\n"
    "Status: {summary}\n"
    "\n"
    "{action} when appropriate, staging only the files you changed. Do not run `git push` for MemFS sync; "
    "the harness pushes clean committed memory changes automatically for remote MemFS agents after turns.\n"
    "</system-reminder>"
)

SYNC_PUSH_FAILED_TEMPLATE = (
    "<system-reminder>\n"
    "MEMORY SYNC FAILED: The harness could not push pending memory commits.\n"
    "\n"
    "Memory directory: {memory_dir}\n"
    "Status: {summary}\n"
    "\n"
    "Inspect the memory repository and resolve any local git issue. The harness will retry remote push "
    "after a future turn when the repo is clean.\n"
    "</system-reminder>"
)

REFLECTION_KEPT_TEMPLATE = (
    "<system-reminder>\n"
    "MEMORY REFLECTION KEPT: a background reflection made {n} commit(s) that were not merged into your memory ({reason}).\n"
    "Nothing was lost: they are on branch {branch}.\n"
    "Files involved: {files}\n"
    "When it suits the user's work, run `reverie reflections merge {id}` to retry, or review them with "
    "`git -C \"$MEMORY_DIR\" log -p {branch}` and apply what still matters yourself. Do not delete the branch.\n"
    "</system-reminder>"
)

MEMORY_INVALID_TEMPLATE = (
    "<system-reminder>\n"
    "MEMORY INVALID: the committed memory at {sha7} fails validation:\n"
    "{errors}\n"
    "Fix these files and commit the fix, staging only the files you changed.\n"
    "</system-reminder>"
)


INVALID_SHOWN: Final = 20
INVALID_LINE_CHARS: Final = 300
_INVALID_MORE: Final = (
    "  ... {hidden} more ({total} problems in all); run `reverie memory validate --head \"$MEMORY_DIR\"` to see them all"
)


def reflection_kept_reminder(*, n: int, reason: str, branch: str, files: Sequence[str], id: str) -> str:
    """S12: a reflection branch kept after a conflict, a dirty parent or a failure."""
    return REFLECTION_KEPT_TEMPLATE.format(
        n=n, reason=neutralise(reason), branch=neutralise(branch), files=neutralise(", ".join(files)), id=neutralise(id)
    )


def memory_invalid_reminder(sha7: str, errors: Sequence[str]) -> str:
    """S12 (M8): the committed HEAD fails the audit; one error per line, two-space indent.

    Up to ``INVALID_SHOWN`` errors the text is S12's exactly; past it, the first ones and a line with
    the count and the command that lists them all. A line longer than ``INVALID_LINE_CHARS`` is cut
    with ``...``."""
    lines = ["  " + _cut(neutralise(error)) for error in errors[:INVALID_SHOWN]]
    if len(errors) > INVALID_SHOWN:
        lines.append(_INVALID_MORE.format(hidden=len(errors) - INVALID_SHOWN, total=len(errors)))
    return MEMORY_INVALID_TEMPLATE.format(sha7=sha7, errors="\n".join(lines))


def _cut(line: str) -> str:
    return line if len(line) <= INVALID_LINE_CHARS else line[: INVALID_LINE_CHARS - 3] + "..."


def iso_utc(moment: datetime) -> str:
    """ISO-8601 UTC with seconds (T5), e.g. ``2026-10-09T15:42:10Z``."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def memory_update_block(revision: str | None, core_memory: str) -> str:
    """TURN-3.1: trailing whitespace of the memory removed (JavaScript's ``trimEnd`` set, as
    the reference trims), leading kept."""
    return MEMORY_UPDATE_TEMPLATE.format(revision=revision or "unknown", core_memory=js_trim_end(core_memory))


def memory_update_reminder(revision: str, core_memory: str) -> str:
    """TURN-3.4: the persisted user-role update."""
    return "<system-reminder>\n" + memory_update_block(revision, core_memory) + "\n</system-reminder>"


def agent_info_reminder(
    *,
    agent_id: str,
    agent_name: str | None,
    agent_description: str | None,
    conversation_id: str | None,
    memory_dir: str | None,
    last_run: datetime | None,
    now: datetime | None = None,
) -> str:
    """TURN-7.2 with the TURN-7.5 changes: ISO-8601 UTC last-run time, memory line with MemFS.
    ``now`` (default the current time) is what the relative "... ago" is measured from."""
    return AGENT_INFO_TEMPLATE.format(
        agent_id=agent_id,
        conversation_line=_CONVERSATION_LINE.format(conversation_id=conversation_id) if conversation_id else "",
        memory_dir_line=_MEMORY_DIR_LINE.format(memory_dir=memory_dir) if memory_dir else "",
        agent_name=neutralise(agent_name or "(unnamed)"),
        agent_description=neutralise(agent_description or "(no description)"),
        last_message=_last_message(last_run, now),
    )


def _last_message(last_run: datetime | None, now: datetime | None = None) -> str:
    if last_run is None:
        return "No previous messages"
    now = now or datetime.now(UTC)
    seconds = max(0, int((now - last_run).total_seconds()))
    for unit, size in (("day", 86400), ("hour", 3600), ("minute", 60)):
        if seconds >= size:
            count = seconds // size
            relative = f"{count} {unit}{'' if count == 1 else 's'} ago"
            break
    else:
        relative = "just now"
    return f"{iso_utc(last_run)} ({relative})"


def sync_reminder(status: str, *, memory_dir: str, summary: str, local_only: bool) -> str | None:
    """TURN-4.7 item 5 (phase 1): the reminder for a post-turn sync status, if any.

    ``invalid`` uses the push-failed text with the validator output as its summary (reverie's choice,
    TURN-4.7).
    """
    memory_dir, summary = neutralise(memory_dir), neutralise(summary)
    if status == "conflict":
        return SYNC_CONFLICT_TEMPLATE.format(memory_dir=memory_dir, summary=summary)
    if status == "dirty":
        action = "Commit these memory changes locally" if local_only else "Commit these memory changes"
        return SYNC_DIRTY_TEMPLATE.format(memory_dir=memory_dir, summary=summary, action=action)
    if status in {"push_failed", "invalid"}:
        return SYNC_PUSH_FAILED_TEMPLATE.format(memory_dir=memory_dir, summary=summary)
    return None


def join_reminders(texts: Sequence[str]) -> str:
    """Queued reminders reach the model as one part, joined by one empty line (4.5)."""
    return "\n\n".join(texts)
