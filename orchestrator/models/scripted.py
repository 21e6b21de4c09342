"""The embedded, deterministic, offline model: reverie's default when no endpoint is configured.

It is stateless (S27): every answer is a function of the request alone, so a rule is
followed only while its text is in the request, and removing a ``<memory_update>`` makes the rule
vanish; tests rely on that to prove the model really saw something. Rules are read from the system
prompt and reminders, never from plain user text or tool output. What it answers for each purpose
(``chat``, ``summarize``, ``reflect``, ``resolve``) and how a test script drives it is listed in
``docs/scripted-model.md``.

The model is ``complete`` and chat here; each other purpose is a module of its own
(``scripted_reflect``, ``scripted_summarize``, ``scripted_resolve``; answering a memory question:
``scripted_recall``), and what they all read of a request (rule sources, the last turn, the offered
tools, the call a tool result answers) is ``scripted_request``, the rules and the commands that save
them ``scripted_rules``.
"""

from __future__ import annotations

import inspect
import json
import re
from collections import deque
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping
from typing import Any

from anyio import sleep as anyio_sleep

from orchestrator.base.errors import UsageError

from .scripted_recall import (
    answer_from_memory,
    best_sentence,
    current_date,
    enough,
    memory_question,
    next_search,
    quote,
    searched_terms,
)
from .scripted_reflect import reflect
from .scripted_request import (
    REMINDER_BLOCK,
    STOPWORDS,
    Turn,
    call_id,
    is_reminder,
    last_turn,
    offers,
    own_call,
    rule_sources,
    tool_ok,
    user_text,
)
from .scripted_resolve import resolve_turn
from .scripted_rules import answer_rules, apply_rules, memory_lines, remember_command, stated_rule
from .scripted_summarize import summarize
from .types import (
    Message,
    ModelClient,
    ModelError,
    ModelRequest,
    ModelResponse,
    TextSink,
    ToolCall,
    ToolSpec,
    Usage,
)

__all__ = [
    "CONFIRMATION",
    "CONFIRMATION_ZH",
    "LATENCY_ENV",
    "ScriptStep",
    "ScriptedModel",
    "estimated_usage",
    "latency_from_env",
]

LATENCY_ENV = "REVERIE_SCRIPTED_LATENCY"
_MAX_LATENCY = 3600.0


def latency_from_env(environ: Mapping[str, str]) -> float:
    """``REVERIE_SCRIPTED_LATENCY`` seconds for the scripted model in chat (``reverie run`` takes
    ``--scripted-latency``; both end up as ``ScriptedModel(latency=...)``)."""
    raw = environ.get(LATENCY_ENV, "").strip()
    if not raw:
        return 0.0
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not 0 <= value <= _MAX_LATENCY:
        raise UsageError(f"{LATENCY_ENV}={raw!r}: give seconds, a number from 0 to {_MAX_LATENCY:g}")
    return value


CONFIRMATION = "Noted — I saved that to memory."
CONFIRMATION_ZH = "好的，我已经把这件事记进记忆里了。"
_HEARD = "(mock) I heard: "
_HEARD_ZH = "（mock）我听到了："

ScriptStep = ModelResponse | Callable[[ModelRequest], "ModelResponse | Awaitable[ModelResponse]"]

_CJK = re.compile(r"[\u3400-\u9fff\uf900-\ufaff]")
_RECALL = (
    re.compile(r"\bwhat\s+did\s+i\s+(?:say|tell\s+you|write|mention)\s+(?:about|regarding|on)\s+(.+)$", re.I),
    re.compile(r"\bdo\s+you\s+remember\s+(?:what\s+i\s+said\s+about\s+)?(.+)$", re.I),
    re.compile(r"\bearlier\b(.*)$", re.I),
    re.compile(r"(?:之前|刚才|还记得)(.*)$"),
)
_ZH_FILLER = re.compile(r"我|你|说过|说的|说了|提到|什么|关于|的|吗|呢|吧|还记得|之前|刚才|有关|过")
_JSON_CONTENT = re.compile(r'"(?:content|text|summary)":\s*"((?:[^"\\]|\\.)*)"')


def _estimate(text: str) -> int:
    return (len(text) + 3) // 4


_SPEC_CHARS: dict[int, tuple[ToolSpec, int]] = {}


def _spec_chars(spec: ToolSpec) -> int:
    """Characters a tool schema adds to the prompt estimate; the same few specs come with every
    request, so each is encoded once (keyed by identity, the spec kept so its id stays its own)."""
    known = _SPEC_CHARS.get(id(spec))
    if known is not None and known[0] is spec:
        return known[1]
    chars = len(spec.name + spec.description + json.dumps(dict(spec.parameters)))
    if len(_SPEC_CHARS) < 256:
        _SPEC_CHARS[id(spec)] = (spec, chars)
    return chars


def _recall_query(text: str) -> str | None:
    for pattern in _RECALL:
        match = pattern.search(text)
        if not match:
            continue
        rest = match.group(1)
        if _CJK.search(rest) or (not rest.strip() and _CJK.search(text)):
            query = _ZH_FILLER.sub(" ", re.sub(r"[^\w\s]", " ", rest)).split()
        else:
            query = [w for w in re.findall(r"[\w'.-]+", rest.lower()) if w not in STOPWORDS]
        if query:
            return " ".join(query)
    return None


def _hit_texts(result: str) -> Iterator[str]:
    try:
        data: Any = json.loads(result)
    except ValueError:
        fields = _JSON_CONTENT.findall(result)
        if fields:  # a JSON result cut in the middle to fit the window: its whole fields still count
            for raw in fields:
                try:
                    yield REMINDER_BLOCK.sub("", json.loads(f'"{raw}"')).strip()
                except ValueError:
                    continue
            return
        yield from (line.strip() for line in result.splitlines() if line.strip())
        return
    if isinstance(data, dict):
        data = data.get("results", [data])
    for item in data if isinstance(data, list) else []:
        if not isinstance(item, dict):
            continue
        for key in ("content", "text", "summary", "tool_return"):
            value = item.get(key)
            if isinstance(value, list):
                value = "\n".join(part.get("text", "") for part in value if isinstance(part, dict))
            if isinstance(value, str) and value.strip():
                yield REMINDER_BLOCK.sub("", value).strip()
                break


class ScriptedModel(ModelClient):
    """See the module docstring for the rules; ``requests`` records what it was asked (for tests):
    the last ``REQUEST_LOG`` requests at least, never more than twice that, so a long session on the
    embedded model does not keep every message it ever sent alive (bench/soak.py: at 1,000 the log
    held up to 2,000 requests with their messages, a sawtooth of RSS; no test looks back past a few)."""

    REQUEST_LOG = 100

    def __init__(
        self,
        script: Iterable[ScriptStep] = (),
        *,
        strict: bool = False,
        latency: float = 0.0,
        model: str = "scripted",
    ) -> None:
        self._script: deque[ScriptStep] = deque(script)
        self.strict = strict
        self.latency = latency
        self.model = model
        self.requests: list[ModelRequest] = []

    @property
    def remaining(self) -> int:
        return len(self._script)

    async def complete(self, request: ModelRequest, *, on_text: TextSink | None = None) -> ModelResponse:
        self.requests.append(request)
        if len(self.requests) > 2 * self.REQUEST_LOG:
            del self.requests[: -self.REQUEST_LOG]
        if self.latency > 0:
            await anyio_sleep(self.latency)
        if self._script:
            step = self._script.popleft()
            if isinstance(step, ModelResponse):
                response = step
            else:
                produced = step(request)
                response = await produced if inspect.isawaitable(produced) else produced
        elif self.strict:
            raise ModelError("model error: scripted model has no scripted response left (strict mode)")
        else:
            response = self._respond(request)
        if on_text is not None and response.message.content:
            for piece in re.findall(r"\S+\s*|\s+", response.message.content):
                await on_text(piece)
        return response

    def _respond(self, request: ModelRequest) -> ModelResponse:
        if request.purpose == "summarize":
            turn = Turn(summarize(request))
        elif request.purpose == "reflect":
            turn = reflect(request)
        elif request.purpose == "resolve":
            turn = Turn(*resolve_turn(request, rule_sources(request), call_id))
        else:
            turn = _chat(request)
        message = Message(role="assistant", content=turn.text, tool_calls=turn.tool_calls)
        return ModelResponse(
            message=message,
            usage=estimated_usage(request, message),
            finish_reason="tool_calls" if turn.tool_calls else "stop",
            model=self.model,
        )


def estimated_usage(request: ModelRequest, reply: Message) -> Usage:
    """The usage this model reports for ``reply`` to ``request``: a quarter of the characters of
    the request (system, messages, tool calls, tool schemas) and of the reply. A replayed recorded
    reply reports the same (``orchestrator.agent.replay``), so replay counts context as this model would."""
    prompt = len(request.system) + sum(
        len(m.content) + sum(len(c.arguments) for c in m.tool_calls) for m in request.messages
    )
    prompt += sum(_spec_chars(t) for t in request.tools)
    completion = reply.content + "".join(c.name + c.arguments for c in reply.tool_calls)
    return Usage((prompt + 3) // 4, _estimate(completion))


def _since_question(request: ModelRequest) -> list[Message]:
    """The messages after the last one the user wrote (this turn's steps)."""
    found: list[Message] = []
    for message in reversed(request.messages):
        if message.role == "user" and not is_reminder(message):
            break
        found.append(message)
    return found[::-1]


def _recall_step(request: ModelRequest, question: str, text: str) -> str | Turn:
    """After a search result of a memory question: answer, or search the next keyword
    (docs/architecture.md, "The scripted model's recall")."""
    steps = _since_question(request)
    held, sentence = best_sentence(question, [m for m in steps if m.role == "tool"])
    if not enough(question, held) and offers(request, "conversation_search"):
        searched = searched_terms([c for m in steps for c in m.tool_calls if c.name == "conversation_search"])
        call = next_search(question, searched, current_date(text), call_id(request))
        if call is not None:
            return Turn("", (call,))
    return quote(sentence)


def _question_before(request: ModelRequest, tool_message: Message) -> str:
    seen = False
    for message in reversed(request.messages):
        if message is tool_message:
            seen = True
        elif seen and message.role == "user" and not is_reminder(message):
            return user_text(message)
    return ""


def _chat(request: ModelRequest) -> Turn:
    rules = answer_rules(rule_sources(request))
    last = last_turn(request)
    if last is None or last.role == "assistant":
        return Turn(apply_rules("(mock) Nothing to answer.", rules))
    if last.role == "tool":
        after = _after_tool(request, last)
        return after if isinstance(after, Turn) else Turn(apply_rules(after, rules))
    text = user_text(last)
    chinese = bool(_CJK.search(text))
    rule = stated_rule(text)
    if rule is not None and offers(request, "bash"):
        known = {line.casefold() for line in memory_lines(request)}
        if rule.casefold() in known:
            reply = "我已经记得这件事了。" if chinese else "I already have that in memory."
            return Turn(apply_rules(reply, rules))
        layout_v1 = "system/persona.md" in request.system
        arguments = json.dumps({"command": remember_command(rule, layout_v1=layout_v1)}, ensure_ascii=False)
        return Turn("", (ToolCall(call_id(request), "bash", arguments),))
    query = _recall_query(text)
    if query is not None and offers(request, "conversation_search"):
        arguments = json.dumps({"query": query, "limit": 5}, ensure_ascii=False)
        return Turn("", (ToolCall(call_id(request), "conversation_search", arguments),))
    question = memory_question(text)
    if question is not None:
        remembered = answer_from_memory(question, memory_lines(request))
        if remembered is not None:
            return Turn(apply_rules(remembered, rules))
        call = next_search(question, [], current_date(text), call_id(request))
        if call is not None and offers(request, "conversation_search"):
            return Turn("", (call,))
    return Turn(apply_rules((_HEARD_ZH if chinese else _HEARD) + text, rules))


def _after_tool(request: ModelRequest, result: Message) -> str | Turn:
    call = own_call(request, result.tool_call_id)
    question = _question_before(request, result)
    chinese = bool(_CJK.search(question))
    first_line = next((line.strip() for line in result.content.splitlines() if line.strip()), "")
    if call is not None and call.name == "bash":
        if tool_ok(result.content):
            return CONFIRMATION_ZH if chinese else CONFIRMATION
        return f"保存记忆失败：{first_line}" if chinese else f"I could not save that to memory: {first_line}"
    if call is not None and call.name == "conversation_search":
        asked = memory_question(question) if _recall_query(question) is None else None
        if asked is not None:
            return _recall_step(request, asked, question)
        for hit in _hit_texts(result.content):
            if hit and hit != question and question not in hit:
                return f"之前你说过：“{hit}”" if chinese else f'Earlier you said: "{hit}"'
        return (
            "我没有找到相关的早先内容。"
            if chinese
            else "I found nothing about that earlier in our conversation."
        )
    name = call.name if call is not None else (result.name or "tool")
    return f"(mock) {name} returned: {first_line}"


