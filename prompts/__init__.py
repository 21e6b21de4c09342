"""Prompt templates shipped as package data.

Every text a model reads (the main system prompt, the reflection and summarizer prompts) is a
Markdown file beside this module, so a reviewer can read and edit prompts without touching code.
"""

from __future__ import annotations

from functools import cache
from importlib import resources

__all__ = ["load_prompt", "prompt_names"]


@cache
def load_prompt(name: str) -> str:
    """Return the template ``name`` (without ``.md``); raises ``KeyError`` naming the missing file."""
    path = resources.files(__name__).joinpath(f"{name}.md")
    if not path.is_file():
        raise KeyError(f"prompts/{name}.md: no such prompt template")
    return path.read_text(encoding="utf-8")


def prompt_names() -> list[str]:
    """Names of every shipped template, sorted."""
    return sorted(
        p.name[: -len(".md")] for p in resources.files(__name__).iterdir() if p.name.endswith(".md")
    )
