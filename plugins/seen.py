"""clean.seen: pages already in this session's chunk store (same URL or near-duplicate text), or
repeated within the batch, are dropped before chunking, so each page is stored and used once.

Runs after the other cleaners (signatures are taken of the main text, not of the HTML). Every source
it keeps gets `metadata["signature"]`, which the store saves for later batches and processes.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from compactor import textsim
from compactor.components import Component
from compactor.document import Context, Source, frozen_mapping
from compactor.hookspecs import hookimpl
from compactor.run import Run


class SeenPages(Component):
    """Drops pages this session already holds, or that repeat in the batch (URL or near-duplicate)."""

    name = "clean.seen"
    stage = "clean"

    def __init__(self, *, threshold: float = 0.8) -> None:
        self.threshold = threshold

    @staticmethod
    def check_params(params: dict[str, Any]) -> list[str]:
        return [] if 0 < params["threshold"] <= 1 else ["threshold must be in (0, 1]"]

    @hookimpl
    def compactor_clean(self, context: Context, run: Run) -> Context:
        session = run.settings.get("session") or {}
        store, session_id = session.get("store"), session.get("id")
        kept: list[Source] = []
        dropped: list[dict[str, Any]] = []
        urls: dict[str, str] = {}
        for source in context.sources:
            sig = textsim.signature(source.text)
            twin = urls.get(source.uri or "") or next(
                (k.id for k in kept if textsim.similarity(sig, k.metadata["signature"]) >= self.threshold),
                None)
            reason = "repeated in this batch"
            if twin is None and store is not None and session_id:
                twin = store.known_page(session_id, source.uri, sig, self.threshold)
                reason = "already in the session"
            if twin is not None:
                dropped.append({"url": source.uri, "source_id": source.id, "same_as": twin, "reason": reason})
                continue
            if source.uri:
                urls[source.uri] = source.id
            kept.append(replace(source, metadata=frozen_mapping({**source.metadata, "signature": sig})))
        run.note("dropped_pages", dropped)
        return context.evolve(sources=tuple(kept))
