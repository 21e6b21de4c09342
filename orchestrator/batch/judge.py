"""The optional LLM judge of a graded task (``reverie run|sweep --judge-model``), for real-model runs.

Deterministic grading (``orchestrator.batch.grading``) is the default because it is free and gives
the same score twice; a judge reads paraphrases it cannot ("a bachelor's in business" for
"Business Administration"). The judge is any OpenAI-compatible endpoint: ``--judge-base-url``, else
the endpoint the run's settings configure (``REVERIE_BASE_URL``), with their API key. The rubric,
the judge's model and its verdict are stored with the task's result, so a score can be audited.
The judge's tokens are not the agent's and are not counted in the task's tokens.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from orchestrator.base.errors import UsageError
from orchestrator.models.types import Message, ModelClient, ModelError, ModelRequest

__all__ = ["JUDGE_RUBRIC", "Judge", "build_judge", "judge_prompt", "parse_verdict"]

JUDGE_RUBRIC = (
    "You grade a chat assistant's answer to a question about the user's own past conversations. "
    "You are given the question, the correct answer (the answer key) and the assistant's reply. "
    "Answer 'yes' if the reply contains the correct answer or an equivalent of it (the same fact, "
    "number or date, in any wording); answer 'no' if it gives another answer, only part of the "
    "answer, or no answer. When the key lists acceptable alternatives, any one of them is correct. "
    "For a question about a changed fact, only the latest value is correct. "
    "Reply with one word, yes or no."
)


def judge_prompt(question: str, key: str, reply: str) -> str:
    return f"Question: {question}\n\nCorrect answer: {key}\n\nAssistant's reply: {reply}\n\nIs the reply correct? yes or no:"


def parse_verdict(text: str) -> bool | None:
    """``yes`` -> True, ``no`` -> False (the first word, case and punctuation aside); else None."""
    words = text.strip().lower().replace("*", " ").split()
    first = words[0].strip(".,:;!\"'") if words else ""
    return {"yes": True, "no": False, "correct": True, "incorrect": False}.get(first)


@dataclass(frozen=True)
class Judge:
    """A judge model and its name; ``verdict`` never raises for a bad reply (it is recorded).
    ``close`` releases the model's connections (the runner calls it when the task's grade is done)."""

    model: ModelClient
    name: str
    close: Callable[[], Awaitable[None]] | None = None

    async def aclose(self) -> None:
        if self.close is not None:
            await self.close()

    async def verdict(self, *, question: str, key: str, reply: str) -> Mapping[str, Any]:
        """The judge's record for the result: rubric, model, the raw verdict and ``passed``. A
        verdict that is neither yes nor no, or a failed call, fails the task's grade and says why."""
        request = ModelRequest(
            system=JUDGE_RUBRIC,
            messages=(Message(role="user", content=judge_prompt(question, key, reply)),),
            model=self.name,
            max_tokens=16,
        )
        try:
            response = await self.model.complete(request)
        except ModelError as exc:
            return {"model": self.name, "rubric": JUDGE_RUBRIC, "verdict": None, "passed": False, "error": str(exc)}
        text = response.message.content.strip()
        passed = parse_verdict(text)
        record: dict[str, Any] = {"model": self.name, "rubric": JUDGE_RUBRIC, "verdict": text, "passed": bool(passed)}
        if passed is None:
            record["error"] = "the judge answered neither yes nor no"
        return record


def build_judge(name: str, base_url: str | None, api_key: str | None) -> Judge:
    """The judge for ``--judge-model NAME`` at ``base_url``; a one-line ``UsageError`` without one."""
    if not base_url:
        raise UsageError(
            f"--judge-model {name}: no endpoint for the judge: give --judge-base-url or configure REVERIE_BASE_URL"
        )
    # lazy: the OpenAI SDK takes over a second to import; runs without a judge never need it
    from orchestrator.models.openai_client import model_from_settings

    model = model_from_settings(base_url, api_key, name)
    return Judge(model, name, model.aclose)
