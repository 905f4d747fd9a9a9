"""The token router's decisions and the note a report carries about its source, as a report
graph names them: shared by the `compress.map_reduce` step and the LangGraph nodes."""

from __future__ import annotations

from typing import Final

#: Decisions of the token router, as the report graph's state names them.
DIRECT: Final = "direct_to_reporter"
COMPRESS: Final = "compress_first"

#: The line a reporter adds under its report: which text it was written from.
DATA_SOURCE_NOTES = {
    ("summarized", "en"): "Note: this report is based on summarized research content.",
    ("summarized", "zh"): "注意: 本报告基于智能摘要的研究内容生成。",
    ("full", "en"): "Note: this report is based on the full research content.",
    ("full", "zh"): "注意: 本报告基于完整的研究内容生成。",
}


def data_source_note(summarized: bool, lang: str = "en") -> str:
    """The note for a report written from summarized (or full) observations, in `lang` ("en"/"zh")."""
    return DATA_SOURCE_NOTES[("summarized" if summarized else "full", "zh" if lang == "zh" else "en")]
