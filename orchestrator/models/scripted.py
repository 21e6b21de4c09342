"""The embedded, deterministic, offline model: reverie's default when no endpoint is configured.

It is stateless (S27): every answer is a function of the request alone, so a rule is
followed only while its text is in the request, and removing a ``<memory_update>`` makes the rule
vanish; tests rely on that to prove the model really saw something. Rules are read from the system
prompt and reminders, never from plain user text or tool output. What it answers for each purpose
(``chat``, ``summarize``, ``reflect``, ``resolve``) and how a test script drives it is listed in
``docs/scripted-model.md``.

Why one module of ~770 lines: it is one stateless function of the request (``complete``), and its
purposes share the same readers of a request (rule sources, the last turn, the transcript's user
lines, the offered tools); split by purpose, each part would import the others' private readers.
Merge resolution, which shares none of them, already lives apart (``scripted_resolve``).
"""

from __future__ import annotations

import hashlib
import inspect
import json
import re
from collections import deque
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from anyio import sleep as anyio_sleep

from orchestrator.base.errors import UsageError
from orchestrator.base.identifiers import extract_identifiers

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
from .scripted_resolve import resolve_turn
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
    "ABOUT_ME_MAX",
    "ABOUT_ME_PER_REFLECTION",
    "CONFIRMATION",
    "CONFIRMATION_ZH",
    "LATENCY_ENV",
    "ScriptStep",
    "ScriptedModel",
    "answer_rules",
    "estimated_usage",
    "extract_identifiers",
    "latency_from_env",
    "remember_command",
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
_DEFAULT_SUMMARY_TOKENS = 1000

ScriptStep = ModelResponse | Callable[[ModelRequest], "ModelResponse | Awaitable[ModelResponse]"]

_REMINDER_BLOCK = re.compile(r"<system-reminder>.*?</system-reminder>", re.S)
_CJK = re.compile(r"[\u3400-\u9fff\uf900-\ufaff]")
_BULLET = re.compile(r"^\s*[-*]\s+(.+?)\s*$")
_NOUNS = r"(?:answers?|repl(?:y|ies)|responses?|messages?)"
_RULE_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    (
        "suffix",
        re.compile(rf"^(?:always\s+)?end\s+(?:(?:all|every|each|your)\s+)*{_NOUNS}\s+with\s+(.+)$", re.I),
    ),
    (
        "prefix",
        re.compile(
            rf"^(?:always\s+)?(?:start|begin)\s+(?:(?:all|every|each|your)\s+)*{_NOUNS}\s+with\s+(.+)$", re.I
        ),
    ),
    ("suffix", re.compile(r"^回答末尾(?:总是|都|一律)?(?:加上|带上|加)\s*(.+)$")),
    ("prefix", re.compile(r"^回答开头(?:总是|都|一律)?(?:加上|带上|加)\s*(.+)$")),
)
_REMEMBER = (
    re.compile(r"^(?:please\s+)?remember\s*(?:[:：,]|\s+that\b)\s*(.+)$", re.I | re.S),
    re.compile(r"^from\s+now\s+on\s*[,:：]?\s*(.+)$", re.I | re.S),
    re.compile(r"^(?:设定|记住)\s*[:：]\s*(.+)$", re.S),
)
_FACT = re.compile(r"^(?:my name is|i prefer|i like|i use|call me|我叫|我喜欢|我更喜欢|我习惯|我用)", re.I)
_ABOUT_ME = re.compile(
    r"^(?:i(?:'m|'ve| am| was| have| had| live| lived| work| worked| moved| graduated| bought| got| started"
    r"| finished| own| spent| visited| went| recently| just| usually| always| never| love| hate| enjoy)\b"
    r"|my\s+(?:[a-z'-]+\s+){0,2}(?:is|was|are|were)\b)",
    re.I,
)
"""A sentence in which the user states something about themselves, in the first person."""
_SENTENCE_END = re.compile(r"(?<=[.!])\s+")
ABOUT_ME_MAX = 160
"""Longer first-person sentences are narration, not a fact worth a memory line."""
ABOUT_ME_PER_REFLECTION = 6
"""At most this many such sentences per reflection: memory keeps the user's facts, not the transcript."""
_PERSONA_WORDS = re.compile(
    r"\b(?:answers?|repl(?:y|ies)|respon(?:d|ses?)|you|your|yourself)\b|回答|回复|你", re.I
)
_RECALL = (
    re.compile(r"\bwhat\s+did\s+i\s+(?:say|tell\s+you|write|mention)\s+(?:about|regarding|on)\s+(.+)$", re.I),
    re.compile(r"\bdo\s+you\s+remember\s+(?:what\s+i\s+said\s+about\s+)?(.+)$", re.I),
    re.compile(r"\bearlier\b(.*)$", re.I),
    re.compile(r"(?:之前|刚才|还记得)(.*)$"),
)
_STOPWORDS = frozenset(
    "a an the my me i you we us our your about of on in at to for with what when where which who how did do does "
    "is are was were say said tell told that this it earlier before previously remember please".split()
)
_TRANSCRIPT_WORDS = frozenset({"user", "assistant", "tool", "http", "https", "generate", "summary"})
_ZH_FILLER = re.compile(r"我|你|说过|说的|说了|提到|什么|关于|的|吗|呢|吧|还记得|之前|刚才|有关|过")
_JSON_CONTENT = re.compile(r'"(?:content|text|summary)":\s*"((?:[^"\\]|\\.)*)"')
_ERROR_WORDS = re.compile(r"\b(?:error|errors|failed|failure|exception|traceback|fatal)\b", re.I)


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


def _clean_value(value: str) -> str:
    value = value.strip()
    pairs = {'"': '"', "'": "'", "`": "`", "“": "”", "「": "」", "‘": "’"}
    if len(value) >= 2 and value[0] in pairs and value[-1] == pairs[value[0]]:
        return value[1:-1].strip()
    if len(value) > 1 and value[-1] in ".。":
        value = value[:-1].rstrip()
        if len(value) >= 2 and value[0] in pairs and value[-1] == pairs[value[0]]:
            value = value[1:-1].strip()
    return value


def _rule_sources(request: ModelRequest) -> list[str]:
    sources = [request.system] if request.system else []
    for message in request.messages:
        if message.kind in ("reminder", "memory_update") or message.role == "system":
            sources.append(message.content)
        elif message.role == "user":
            sources.extend(_REMINDER_BLOCK.findall(message.content))
    return sources


def _memory_lines(request: ModelRequest) -> list[str]:
    lines: list[str] = []
    for source in _rule_sources(request):
        for line in source.splitlines():
            match = _BULLET.match(line)
            if match:
                lines.append(match.group(1))
    return lines


def answer_rules(texts: Iterable[str]) -> list[tuple[str, str]]:
    """``(kind, value)`` for every answer rule found as a list line in ``texts``, first-seen order."""
    rules: list[tuple[str, str]] = []
    for text in texts:
        for line in text.splitlines():
            bullet = _BULLET.match(line)
            if not bullet:
                continue
            for kind, pattern in _RULE_PATTERNS:
                match = pattern.match(bullet.group(1))
                if match:
                    rule = (kind, _clean_value(match.group(1)))
                    if rule[1] and rule not in rules:
                        rules.append(rule)
                    break
    return rules


def _apply_rules(answer: str, rules: list[tuple[str, str]]) -> str:
    for kind, value in rules:
        answer = f"{value} {answer}" if kind == "prefix" else f"{answer} {value}"
    return answer


def _is_reminder(message: Message) -> bool:
    if message.kind in ("reminder", "memory_update"):
        return True
    return (
        message.role == "user"
        and not _REMINDER_BLOCK.sub("", message.content).strip()
        and bool(message.content)
    )


def _user_text(message: Message) -> str:
    return _REMINDER_BLOCK.sub("", message.content).strip()


def _quote(text: str) -> str:
    """A single-quoted shell word for ``text`` (newlines folded to spaces)."""
    return "'" + " ".join(text.split()).replace("'", "'\\''") + "'"


def _target(rule: str, layout_v1: bool) -> tuple[str, str]:
    name = (
        "persona" if _PERSONA_WORDS.search(rule) or any(p.match(rule) for _, p in _RULE_PATTERNS) else "human"
    )
    return name, (f"system/{name}.md" if layout_v1 else f"{name}.md")


_DESCRIPTIONS = {"persona": "Who I am and how I behave.", "human": "What I know about the user."}


def _append_script(name: str, path: str, rules: list[str]) -> str:
    header = " ".join(
        _quote(line) for line in ("---", f"name: {name}", f"description: {_DESCRIPTIONS[name]}", "---")
    )
    parent = path.rsplit("/", 1)[0] if "/" in path else ""
    steps = [f"mkdir -p {parent}"] if parent else []
    steps += [
        f"{{ test -s {path} || printf '%s\\n' {header} > {path}; }}",
        f'{{ test -z "$(tail -c 1 {path})" || echo >> {path}; }}',
        f"printf '%s\\n' {' '.join(_quote('- ' + rule) for rule in rules)} >> {path}",
    ]
    return " && ".join(steps)


def remember_command(rule: str, *, layout_v1: bool = False) -> str:
    """The bash command that appends ``- <rule>`` to the right memory file and commits it.

    Another process of the same agent may have committed the line already (its commit of the file
    took ours along): then there is nothing left to commit and the command still succeeds.
    """
    name, path = _target(rule, layout_v1)
    return (
        f'cd "$MEMORY_DIR" && {_append_script(name, path, [rule])} && git add -- {path} && '
        f"{{ git commit -q -m 'feat: update {name}' -- {path} || "
        f"git show HEAD:{path} | grep -qxF -- {_quote('- ' + rule)}; }} && "
        "git log --oneline -1"
    )


def _reflection_command(rules: list[str], layout_v1: bool) -> str:
    groups: dict[str, tuple[str, list[str]]] = {}
    for rule in rules:
        name, path = _target(rule, layout_v1)
        groups.setdefault(name, (path, []))[1].append(rule)
    paths = " ".join(path for path, _ in groups.values())
    appends = " && ".join(_append_script(name, path, items) for name, (path, items) in groups.items())
    subject = _quote(f"feat(reflection): remember {len(rules)} item(s) 🔮")
    return (
        f'cd "$MEMORY_DIR" && {appends} && git add -- {paths} && git commit -q -m {subject} -- {paths} && '
        "git log --oneline -1"
    )


def _stated_rule(text: str) -> str | None:
    for pattern in _REMEMBER:
        match = pattern.match(text.strip())
        if match:
            rule = " ".join(match.group(1).split())
            if len(rule) > 1 and rule[-1] in ".。" and not rule[-2].isspace():
                rule = rule[:-1]
            return rule or None
    return None


def _recall_query(text: str) -> str | None:
    for pattern in _RECALL:
        match = pattern.search(text)
        if not match:
            continue
        rest = match.group(1)
        if _CJK.search(rest) or (not rest.strip() and _CJK.search(text)):
            query = _ZH_FILLER.sub(" ", re.sub(r"[^\w\s]", " ", rest)).split()
        else:
            query = [w for w in re.findall(r"[\w'.-]+", rest.lower()) if w not in _STOPWORDS]
        if query:
            return " ".join(query)
    return None


def _tool_ok(result: str) -> bool:
    if re.search(r"\bfatal:|\berror\b", result, re.I):
        return False
    code = re.search(r"exit(?:ed with)?(?: code| status)?[:= ]+(\d+)", result, re.I)
    return not (code and code.group(1) != "0")


def _hit_texts(result: str) -> Iterator[str]:
    try:
        data: Any = json.loads(result)
    except ValueError:
        fields = _JSON_CONTENT.findall(result)
        if fields:  # a JSON result cut in the middle to fit the window: its whole fields still count
            for raw in fields:
                try:
                    yield _REMINDER_BLOCK.sub("", json.loads(f'"{raw}"')).strip()
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
                yield _REMINDER_BLOCK.sub("", value).strip()
                break


@dataclass(frozen=True)
class _Turn:
    """One scripted reply: its text and the tool calls it makes."""

    text: str
    tool_calls: tuple[ToolCall, ...] = ()


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
            turn = _Turn(_summarize(request))
        elif request.purpose == "reflect":
            turn = _reflect(request)
        elif request.purpose == "resolve":
            turn = _Turn(*resolve_turn(request, _rule_sources(request), _call_id))
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


def _call_id(request: ModelRequest) -> str:
    digest = hashlib.sha256()
    digest.update(request.purpose.encode() + b"\0" + request.system.encode())
    for message in request.messages:
        digest.update(b"\0" + message.role.encode() + b"\0" + message.content.encode())
        for call in message.tool_calls:
            digest.update(b"\0" + call.id.encode())
    return "call_" + digest.hexdigest()[:12]


def _offers(request: ModelRequest, name: str) -> bool:
    return any(tool.name == name for tool in request.tools)


def _last_turn(request: ModelRequest) -> Message | None:
    for message in reversed(request.messages):
        if not _is_reminder(message):
            return message
    return None


def _own_call(request: ModelRequest, call_id: str | None) -> ToolCall | None:
    for message in request.messages:
        for call in message.tool_calls:
            if call.id == call_id:
                return call
    return None


def _since_question(request: ModelRequest) -> list[Message]:
    """The messages after the last one the user wrote (this turn's steps)."""
    found: list[Message] = []
    for message in reversed(request.messages):
        if message.role == "user" and not _is_reminder(message):
            break
        found.append(message)
    return found[::-1]


def _recall_step(request: ModelRequest, question: str, text: str) -> str | _Turn:
    """After a search result of a memory question: answer, or search the next keyword
    (``scripted_recall``'s module docstring)."""
    steps = _since_question(request)
    held, sentence = best_sentence(question, [m for m in steps if m.role == "tool"])
    if not enough(question, held) and _offers(request, "conversation_search"):
        searched = searched_terms([c for m in steps for c in m.tool_calls if c.name == "conversation_search"])
        call = next_search(question, searched, current_date(text), _call_id(request))
        if call is not None:
            return _Turn("", (call,))
    return quote(sentence)


def _question_before(request: ModelRequest, tool_message: Message) -> str:
    seen = False
    for message in reversed(request.messages):
        if message is tool_message:
            seen = True
        elif seen and message.role == "user" and not _is_reminder(message):
            return _user_text(message)
    return ""


def _chat(request: ModelRequest) -> _Turn:
    rules = answer_rules(_rule_sources(request))
    last = _last_turn(request)
    if last is None or last.role == "assistant":
        return _Turn(_apply_rules("(mock) Nothing to answer.", rules))
    if last.role == "tool":
        after = _after_tool(request, last)
        return after if isinstance(after, _Turn) else _Turn(_apply_rules(after, rules))
    text = _user_text(last)
    chinese = bool(_CJK.search(text))
    rule = _stated_rule(text)
    if rule is not None and _offers(request, "bash"):
        known = {line.casefold() for line in _memory_lines(request)}
        if rule.casefold() in known:
            reply = "我已经记得这件事了。" if chinese else "I already have that in memory."
            return _Turn(_apply_rules(reply, rules))
        layout_v1 = "system/persona.md" in request.system
        arguments = json.dumps({"command": remember_command(rule, layout_v1=layout_v1)}, ensure_ascii=False)
        return _Turn("", (ToolCall(_call_id(request), "bash", arguments),))
    query = _recall_query(text)
    if query is not None and _offers(request, "conversation_search"):
        arguments = json.dumps({"query": query, "limit": 5}, ensure_ascii=False)
        return _Turn("", (ToolCall(_call_id(request), "conversation_search", arguments),))
    question = memory_question(text)
    if question is not None:
        remembered = answer_from_memory(question, _memory_lines(request))
        if remembered is not None:
            return _Turn(_apply_rules(remembered, rules))
        call = next_search(question, [], current_date(text), _call_id(request))
        if call is not None and _offers(request, "conversation_search"):
            return _Turn("", (call,))
    return _Turn(_apply_rules((_HEARD_ZH if chinese else _HEARD) + text, rules))


def _after_tool(request: ModelRequest, result: Message) -> str | _Turn:
    call = _own_call(request, result.tool_call_id)
    question = _question_before(request, result)
    chinese = bool(_CJK.search(question))
    first_line = next((line.strip() for line in result.content.splitlines() if line.strip()), "")
    if call is not None and call.name == "bash":
        if _tool_ok(result.content):
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


_ROLE_TAG = re.compile(r"^\s*(?:\[(user|assistant|tool|reasoning|error)\]|(user|assistant|tool)\s*:)\s*(.*)$", re.I)


def _user_lines_in(text: str) -> list[str]:
    """User-authored lines of one transcript text (tagged lines, JSON records, or plain lines)."""
    records = _json_user_texts(text)
    if records:
        return records
    lines: list[str] = []
    tagged = False
    for line in text.splitlines():
        json_line = _json_user_texts(line) if line.lstrip().startswith("{") else []
        if json_line:
            lines.extend(json_line)
            tagged = True
            continue
        match = _ROLE_TAG.match(line)
        if match:
            tagged = True
            if (match.group(1) or match.group(2) or "").lower() == "user" and match.group(3).strip():
                lines.append(match.group(3).strip())
    if not tagged:
        lines.extend(line.strip() for line in text.splitlines() if line.strip())
    return lines


def _transcript_user_lines(request: ModelRequest) -> list[str]:
    """User-authored lines of the transcripts in the request's non-reminder user messages."""
    lines: list[str] = []
    for message in request.messages:
        if message.role != "user" or _is_reminder(message):
            continue
        lines.extend(_user_lines_in(_user_text(message)))
    return lines


def _json_user_texts(text: str) -> list[str]:
    try:
        data: Any = json.loads(text)
    except ValueError:
        return []
    found: list[str] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            role = node.get("role") or node.get("kind") or node.get("type")
            content = node.get("content", node.get("text"))
            if role in ("user", "user_message") and isinstance(content, str):
                found.append(content.strip())
                return
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(data)
    return [item for item in found if item]


def _reflect(request: ModelRequest) -> _Turn:
    last = _last_turn(request)
    if last is not None and last.role == "tool":
        call = _own_call(request, last.tool_call_id)
        if call is not None and call.name == "bash":
            if _tool_ok(last.content):
                first = next((line for line in last.content.splitlines() if line.strip()), "")
                return _Turn(f"Reflection: saved new memory and committed it ({first.strip()}).")
            return _Turn(
                f"Reflection failed: the memory commit did not succeed: {' '.join(last.content.split())[:200]}"
            )
    known = {line.casefold() for line in _memory_lines(request)}
    reading = _READ_IN_SLICES.search(next((m.content for m in request.messages if m.role == "user"), ""))
    note = ""
    if reading is not None and _offers(request, "read_file"):
        step, note = _read_next_slice(request, reading, last)
        if step is not None:
            return step
        lines = _noted_items(request, note)
    else:
        lines = _transcript_user_lines(request)
    items = _new_items(lines, known)
    if not items:
        return _Turn("Reflection: nothing new to remember.")
    if not _offers(request, "bash"):
        return _Turn("Reflection: found new items but no bash tool to save them: " + "; ".join(items))
    layout_v1 = "system/persona.md" in request.system
    arguments = json.dumps({"command": _reflection_command(items, layout_v1)}, ensure_ascii=False)
    saving = f"Saving {len(items)} item(s) to memory."
    return _Turn(f"{note}\n{saving}" if note else saving, (ToolCall(_call_id(request), "bash", arguments),))


_READ_IN_SLICES = re.compile(
    r"\$TRANSCRIPT_PATH = (?P<path>.+?) \((?P<total>[\d,]+) lines.*?read_file in slices of at most (?P<per>\d+) lines",
    re.S,
)
_NOTES_HEAD = re.compile(r"^Notes from lines \d+-\d+:", re.M)
_PROGRESS = re.compile(r"furthest transcript line read so far is (\d+)")
_NUMBERED = re.compile(r"^\s*\d+\t", re.M)


def _new_items(lines: Iterable[str], known: set[str]) -> list[str]:
    items: list[str] = []
    about_me = 0
    for line in lines:
        rule = _stated_rule(line) or (" ".join(line.split()).rstrip(".。") if _FACT.match(line) else None)
        found = [rule] if rule else []
        if not found and about_me < ABOUT_ME_PER_REFLECTION:
            found = [s for s in _about_me(line) if s.casefold() not in known][: ABOUT_ME_PER_REFLECTION - about_me]
            about_me += len(found)
        for item in found:
            if item.casefold() not in known and item not in items:
                items.append(item)
    return items


def _about_me(line: str) -> list[str]:
    """The first-person statements of fact in a user line (``_ABOUT_ME``), not its questions."""
    out = []
    for sentence in _SENTENCE_END.split(" ".join(line.split())):
        sentence = sentence.strip()
        if "?" in sentence or len(sentence) > ABOUT_ME_MAX or not _ABOUT_ME.match(sentence):
            continue
        out.append(sentence.rstrip(".!"))
    return out


def _slice_items(result: Message) -> list[str]:
    """Facts and rules in one ``read_file`` slice of a transcript (its line numbers stripped)."""
    return _new_items(_user_lines_in(_NUMBERED.sub("", result.content)), set())


def _read_next_slice(
    request: ModelRequest, reading: re.Match[str], last: Message | None
) -> tuple[_Turn | None, str]:
    """While slices remain unread: note what the newest slice held, then ask for the next one.

    Stateless (S27): the slices read so far are the request's own ``read_file`` calls; what they
    held survives in its ``Notes from lines`` replies, since older results get trimmed."""
    path, total, per = reading["path"], int(reading["total"].replace(",", "")), int(reading["per"])
    offsets = [
        int(args.get("offset") or 1)
        for m in request.messages
        for call in m.tool_calls
        if call.name == "read_file" and isinstance(args := _json_object(call.arguments), dict)
        and args.get("path") == path
    ]
    progress = _PROGRESS.search(next((m.content for m in request.messages if m.role == "user"), ""))
    following = max([o + per for o in offsets] + [int(progress.group(1)) + 1 if progress else 1])
    note = ""
    if last is not None and last.role == "tool":
        call = _own_call(request, last.tool_call_id)
        if call is not None and call.name == "read_file":
            start = int(_json_object(call.arguments).get("offset") or 1)
            items = _slice_items(last)
            end = min(total, start + per - 1)
            if items:
                note = f"Notes from lines {start}-{end}:" + "".join(f"\n- {item}" for item in items)
    if following > total:
        return None, note
    arguments = json.dumps({"path": path, "offset": following, "limit": per}, ensure_ascii=False)
    return _Turn(note, (ToolCall(_call_id(request), "read_file", arguments),)), note


def _noted_items(request: ModelRequest, note: str) -> list[str]:
    """Every item of the ``Notes from lines`` replies in the request, and of ``note``."""
    items: list[str] = []
    for text in [*(m.content for m in request.messages if m.role in ("assistant", "user")), note]:
        if _NOTES_HEAD.search(text):
            items.extend(line[2:].strip() for line in text.splitlines() if line.startswith("- "))
    return items


def _json_object(text: str) -> dict[str, Any]:
    try:
        data = json.loads(text)
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


_ALL_HEADINGS = (
    "High level goals",
    "What happened",
    "Important details",
    "Errors and fixes",
    "Current state",
    "Optional Next Step",
    "Lookup hints",
)
_SLIDING_HEADINGS = (
    "High level goals",
    "What happened",
    "Important details",
    "Errors and fixes",
    "Lookup hints",
)


_PINNED_BLOCK = re.compile(r"<(previous_summary|core_memory)>\n(.*?)\n</\1>", re.DOTALL)
# How many identifiers of the previous summary a new one carries beyond those of the evicted messages.
_CARRIED_IDENTIFIERS = 32


def _summarize(request: ModelRequest) -> str:
    """A summary of the evicted messages that updates the pinned previous one.

    Its size does not grow with the session: the core memory block is not summarised (C9: memory
    already holds it), and of the previous summary's identifiers only the newest
    ``_CARRIED_IDENTIFIERS`` are carried beyond every identifier of the evicted messages (what C6
    checks; a summary lists those first, so the first of the previous one are its newest). Carrying them all made each summary longer than the last, so over a long session
    compaction fired ever more often and each one cost more.
    """
    raw = "\n".join(m.content for m in request.messages if not _is_reminder(m))
    blocks = {m.group(1): m.group(2) for m in _PINNED_BLOCK.finditer(raw)}
    source = _PINNED_BLOCK.sub("", raw).replace(". Generate the summary.", "")
    previous = blocks.get("previous_summary", "")
    budget = (request.max_tokens or _DEFAULT_SUMMARY_TOKENS) * 4
    lines = [line.strip() for line in source.splitlines() if line.strip()]
    tagged = [
        (m.group(1), m.group(2))
        for m in (re.match(r"^\[(user|assistant|tool)\]\s?(.*)$", line) for line in lines)
        if m
    ]
    user = [text for role, text in tagged if role == "user"] or ([] if tagged else lines)
    assistant = [text for role, text in tagged if role == "assistant"]
    tools = [text for role, text in tagged if role == "tool"]
    identifiers = list(extract_identifiers(source))
    carried = [i for i in extract_identifiers(previous) if i not in identifiers]
    identifiers += carried[:_CARRIED_IDENTIFIERS]
    source = f"{previous}\n{source}" if previous else source
    errors = [line for line in lines if _ERROR_WORDS.search(line)]
    words = re.findall(r"[A-Za-z_][A-Za-z0-9_]{3,}|[\u4e00-\u9fff]{2,}", source)
    counts: dict[str, int] = {}
    for word in words:
        if word.lower() not in _STOPWORDS and word.lower() not in _TRANSCRIPT_WORDS:
            counts[word] = counts.get(word, 0) + 1
    terms = sorted(counts, key=lambda w: (-counts[w], w))[:12]

    def short(text: str, limit: int = 200) -> str:
        return text if len(text) <= limit else text[: limit - 1] + "…"

    sections: dict[str, list[str]] = {
        "High level goals": [f'User asked: "{short(text)}"' for text in user[:5]],
        "What happened": [
            f"{len(user)} user message(s), {len(assistant)} assistant message(s), {len(tools)} tool result(s)."
        ]
        + [f"Assistant: {short(text, 160)}" for text in assistant[-3:]],
        "Important details": [f"Identifiers: {' '.join(identifiers)}"]
        if identifiers
        else ["No identifiers."],
        "Errors and fixes": [short(line, 160) for line in errors[:5]] or ["None recorded."],
        "Current state": [f'Latest user request: "{short(user[-1])}"'] if user else ["Nothing in progress."],
        "Optional Next Step": [f'Continue with: "{short(user[-1], 120)}"'] if user else ["None."],
        "Lookup hints": [f"Key terms: {', '.join(terms)}"] if terms else ["None."],
    }
    headings = _ALL_HEADINGS if "current state" in request.system.lower() else _SLIDING_HEADINGS
    # Identifiers first: they are what the retention check (C6) looks for, so they never yield to prose.
    out: dict[str, list[str]] = {heading: [] for heading in headings}
    used = sum(len(h) + 4 for h in headings) + len(sections["Important details"][0]) + 3
    out["Important details"] = sections["Important details"]
    for heading in headings:
        if heading == "Important details":
            continue
        for item in sections[heading]:
            if used + len(item) + 3 > budget:
                break
            out[heading].append(item)
            used += len(item) + 3
    text = "\n\n".join(
        f"## {heading}\n" + "\n".join(f"- {item}" for item in out[heading]) for heading in headings
    )
    return text[:budget]
