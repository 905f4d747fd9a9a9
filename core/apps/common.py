"""What every application face shares: shipped pipelines by name and LLM settings as a mapping."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping
from typing import Any

from compactor.errors import InputError
from compactor.llm.client import LLMSettings
from compactor.pipeline import Pipeline


@functools.lru_cache(maxsize=8)
def shipped_pipeline(name: str) -> Pipeline:
    """A pipeline by name or file, loaded once per process."""
    return Pipeline.from_yaml(name)


def llm_mapping(llm: Any) -> dict[str, Any] | None:
    """LLM settings as the mapping `Pipeline.run(llm=...)` takes (None: no LLM; True: the pipeline's)."""
    if llm is None or llm is False:
        return None
    if llm is True:
        return {}
    if isinstance(llm, LLMSettings):
        return {f.name: getattr(llm, f.name) for f in dataclasses.fields(llm)}
    if isinstance(llm, Mapping):
        return dict(llm)
    raise InputError(f"llm must be None, True, a mapping of LLM settings or LLMSettings, "
                     f"not {type(llm).__name__}")
