"""Prompt templates that ship with compactor (`prompts/<name>.<lang>.md`, English and Chinese), and
the one-pass fill of their `{query}`, `{budget}` and `{content}` placeholders.

They live beside the LLM client so that every face that asks a model (the pipeline's plugins, the
LangGraph nodes) reads the same prompts.
"""

from __future__ import annotations

import functools
import importlib.resources
from pathlib import Path

import regex

PROMPT_PACKAGE = "compactor.llm"
_PLACEHOLDER = regex.compile(r"\{(query|budget|content)\}")


@functools.cache
def shipped_prompt(lang: str, name: str = "fallback") -> str:
    """A prompt template that ships with compactor (`prompts/<name>.<lang>.md`, "en" or "zh")."""
    resource = importlib.resources.files(PROMPT_PACKAGE) / "prompts" / f"{name}.{lang}.md"
    return resource.read_text(encoding="utf-8")


def template_for(prompt: str | None, name: str, lang: str) -> str:
    """A user's prompt file when given, else the shipped `<name>.<lang>.md`."""
    return Path(prompt).read_text(encoding="utf-8") if prompt else shipped_prompt(lang, name)


def fill(template: str, **values: str) -> str:
    """Replace `{query}`, `{budget}`, `{content}` in one pass (so braces in the content are safe)."""
    return _PLACEHOLDER.sub(lambda m: values[m.group(1)], template)
