"""The scripted model's memory-question heuristic: it answers from memory or from its own searches,
one keyword per step, and never from anything else (no answer key reaches it)."""

from __future__ import annotations

import json

import pytest

from orchestrator.models.scripted import ScriptedModel
from orchestrator.models.scripted_recall import (
    NOT_FOUND,
    answer_from_memory,
    current_date,
    keywords,
    memory_question,
)
from orchestrator.models.types import Message, ModelRequest, ToolSpec

pytestmark = pytest.mark.anyio

SEARCH = ToolSpec("conversation_search", "search", {})
ASK = "Current date: 2023/05/30 (Tue) 23:40\n\nWhere did I redeem a $5 coupon on coffee creamer?"


def test_question_detection_keywords_and_date() -> None:
    assert memory_question(ASK) == "Where did I redeem a $5 coupon on coffee creamer?"
    assert memory_question("hello there") is None and memory_question("status?") is None
    assert memory_question("I like tea?") is None  # not a question word first
    assert keywords("Where did I redeem a $5 coupon on coffee creamer?") == ["creamer", "redeem", "coupon", "coffee"]
    assert current_date(ASK) == "2023-05-30T23:40:59Z" and current_date("no date") is None


def test_memory_lines_answer_when_they_hold_the_keywords() -> None:
    lines = ["I like tea", "I redeemed a coupon on coffee creamer at Target"]
    assert answer_from_memory("Where did I redeem a $5 coupon on coffee creamer?", lines) == f"From memory: {lines[1]}"
    assert answer_from_memory("Where did I redeem a $5 coupon on coffee creamer?", ["I like coffee"]) is None


def _hits(*items: tuple[str, str, str]) -> str:
    return json.dumps([{"content": c, "date": d, "message_type": t} for c, d, t in items])


async def test_search_one_keyword_per_step_then_quote_the_best_sentence() -> None:
    model = ScriptedModel()
    asked = (Message("user", ASK),)
    first = await model.complete(ModelRequest(system="", messages=asked, tools=(SEARCH,)))
    (call,) = first.message.tool_calls
    assert json.loads(call.arguments) == {"query": "creamer", "limit": 5, "end_date": "2023-05-30T23:40:59Z"}
    weak = Message("tool", _hits(("Creamer is usually dairy.", "2023-05-20", "assistant_message")),
                   tool_call_id=call.id, name="conversation_search")
    second = await model.complete(ModelRequest(system="", messages=(*asked, first.message, weak), tools=(SEARCH,)))
    (next_call,) = second.message.tool_calls  # one keyword was not enough: the next one
    assert json.loads(next_call.arguments)["query"] == "redeem"
    strong = Message("tool", _hits(
        ("I redeemed a $5 coupon on coffee creamer at Target. It was great.", "2023-05-21", "user_message"),
        ("You could redeem coupons online.", "2023-05-22", "assistant_message"),
    ), tool_call_id=next_call.id, name="conversation_search")
    third = await model.complete(
        ModelRequest(system="", messages=(*asked, first.message, weak, second.message, strong), tools=(SEARCH,))
    )
    assert third.message.content == 'From our earlier conversations: "I redeemed a $5 coupon on coffee creamer at Target."'


async def test_newer_statement_wins_and_nothing_found_says_so() -> None:
    model = ScriptedModel()
    question = Message("user", "How many Korean restaurants have I tried in my city?")
    first = await model.complete(ModelRequest(system="", messages=(question,), tools=(SEARCH,)))
    (call,) = first.message.tool_calls
    result = Message("tool", _hits(
        ("I have tried three Korean restaurants in my city.", "2023-08-11T09:09:00Z", "user_message"),
        ("I have tried four Korean restaurants in my city now.", "2023-09-30T15:06:00Z", "user_message"),
    ), tool_call_id=call.id, name="conversation_search")
    answer = await model.complete(ModelRequest(system="", messages=(question, first.message, result), tools=(SEARCH,)))
    assert "four Korean restaurants" in answer.message.content
    empty = Message("tool", "[]", tool_call_id=call.id, name="conversation_search")
    steps: list[Message] = [question, first.message, empty]
    for _ in range(5):
        reply = await model.complete(ModelRequest(system="", messages=tuple(steps), tools=(SEARCH,)))
        if not reply.message.tool_calls:
            break
        steps += [reply.message, Message("tool", "[]", tool_call_id=reply.message.tool_calls[0].id,
                                         name="conversation_search")]
    assert reply.message.content == NOT_FOUND and len(steps) == 3 + 2 * 2  # three keywords searched
