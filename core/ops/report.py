"""A visual compression report: one self-contained HTML file (no network when viewed).

For each source, its text with the kept chunks highlighted and the dropped ones dimmed, each chunk's
scores and labels on hover; the step table (tokens in and out, time); the run's `LossReport`
(from `validate.loss`); a bar plot of tokens after each step (inline SVG). Large inputs stay responsive:
sources beyond the first few are collapsed, and a source's chunks are shown a page at a time.

    compactor-run qa notes.txt --query "..." --report report.html
"""

from __future__ import annotations

import html
import json
from collections.abc import Mapping
from typing import Any

from compactor.components import score_label
from compactor.document import Chunk, Context, Source
from compactor.state import LossReport, thaw

#: Chunks per page of a source; sources opened when the report loads.
PAGE = 200
OPEN_SOURCES = 3

_STYLE = """
body{font:14px/1.5 system-ui,sans-serif;margin:0;color:#1d232a;background:#f6f7f9}
header{background:#1d3557;color:#fff;padding:14px 24px}header h1{margin:0;font-size:20px}
main{padding:16px 24px;max-width:1200px}section{background:#fff;border:1px solid #dde1e6;
border-radius:6px;padding:12px 16px;margin:0 0 16px}h2{font-size:16px;margin:4px 0 10px}
table{border-collapse:collapse;width:100%}
th,td{text-align:left;padding:4px 8px;border-bottom:1px solid #eceff3}
td.n,th.n{text-align:right;font-variant-numeric:tabular-nums}
.text{white-space:pre-wrap;font:13px/1.55 ui-monospace,monospace;max-height:70vh;overflow:auto}
mark.kept{background:#c9f2d0;border-bottom:2px solid #2e9e48;color:inherit}
span.dropped{color:#9aa3ad;text-decoration:none}span.gap{color:#9aa3ad}
.legend span{margin-right:14px}.pager button{margin:6px 4px 0 0}
details>summary{cursor:pointer;font-weight:600;margin:4px 0}.muted{color:#6b7580}
.bad{color:#b3261e}.ok{color:#2e7d32}
"""

_SCRIPT = """
document.querySelectorAll('.pager').forEach(function(pager){
  var pages=pager.parentNode.querySelectorAll('.page');
  pager.querySelectorAll('button').forEach(function(b){
    b.addEventListener('click',function(){
      pages.forEach(function(p){p.hidden=p.dataset.page!==b.dataset.page;});
    });
  });
});
"""


def _kept_ids(context: Context) -> set[str]:
    return {cid for segment in context.segments for cid in segment.chunk_ids}


def _chunk_title(chunk: Chunk, kept: bool) -> str:
    scores = ", ".join(f"{score_label(k)}={v:.3f}" for k, v in sorted(chunk.scores.items()))
    labels = ", ".join(f"{k}={v}" for k, v in sorted(chunk.labels.items())
                       if isinstance(v, str | int | float | bool))
    parts = [f"{chunk.id} ({'kept' if kept else 'dropped'}, {chunk.tokens} tokens)"]
    if scores:
        parts.append(f"scores: {scores}")
    if labels:
        parts.append(f"labels: {labels}")
    return "\n".join(parts)


def _source_html(source: Source, chunks: list[Chunk], kept: set[str], number: int) -> str:
    text = source.text
    pages: list[list[str]] = [[]]
    position = 0
    for n, chunk in enumerate(sorted(chunks, key=lambda c: (c.start, c.end))):
        if n and n % PAGE == 0:
            pages.append([])
        start = max(chunk.start, position)  # overlapping windows: show each character once
        if start > position:
            pages[-1].append(f'<span class="gap">{html.escape(text[position:start])}</span>')
        if chunk.end > start:
            is_kept = chunk.id in kept
            body = html.escape(text[start:chunk.end])
            title = html.escape(_chunk_title(chunk, is_kept), quote=True)
            tag = "mark" if is_kept else "span"
            css = "kept" if is_kept else "dropped"
            pages[-1].append(f'<{tag} class="{css}" data-chunk="{html.escape(chunk.id)}" title="{title}">'
                             f"{body}</{tag}>")
            position = chunk.end
    if position < len(text):
        pages[-1].append(f'<span class="gap">{html.escape(text[position:])}</span>')
    kept_count = sum(c.id in kept for c in chunks)
    name = html.escape(source.title or source.uri or source.id)
    blocks = "".join(f'<div class="text page" data-page="{i}"{" hidden" if i else ""}>{"".join(p)}</div>'
                     for i, p in enumerate(pages))
    pager = ""
    if len(pages) > 1:
        pager = '<div class="pager">' + "".join(
            f'<button data-page="{i}">chunks {i * PAGE + 1}-{min((i + 1) * PAGE, len(chunks))}</button>'
            for i in range(len(pages))) + "</div>"
    opened = " open" if number < OPEN_SOURCES else ""
    return (f'<details class="source"{opened}><summary>{name} <span class="muted">· {kept_count} of '
            f"{len(chunks)} chunks kept · {source.tokens or 0} tokens · {html.escape(source.kind)}</span>"
            f"</summary>{pager}{blocks}</details>")


def _steps_html(context: Context) -> str:
    rows = []
    for r in context.reports:
        rows.append(f"<tr><td>{r.index}</td><td>{html.escape(r.step)}</td><td>{html.escape(r.stage)}</td>"
                    f'<td class="n">{r.tokens_in}</td><td class="n">{r.tokens_out}</td>'
                    f'<td class="n">{r.seconds * 1000:.1f}</td>'
                    f'<td>{"skipped" if r.skipped else ""}</td></tr>')
    return ('<table id="steps"><thead><tr><th>#</th><th>step</th><th>stage</th><th class="n">tokens in</th>'
            '<th class="n">tokens out</th><th class="n">ms</th><th></th></tr></thead><tbody>'
            + "".join(rows) + "</tbody></table>")


def _plot_svg(context: Context) -> str:
    """Tokens after each step, as bars (inline SVG: nothing to load)."""
    reports = list(context.reports)
    if not reports:
        return ""
    values = [reports[0].tokens_in] + [r.tokens_out for r in reports]
    labels = ["input"] + [r.step for r in reports]
    top = max(values) or 1
    width, bar, gap, height = 120 + 70 * len(values), 46, 24, 220
    parts = [f'<svg id="plot" xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height + 60}" '
             f'role="img" aria-label="tokens per step">']
    for i, (value, label) in enumerate(zip(values, labels, strict=True)):
        h = max(1.0, height * value / top)
        x = 40 + i * (bar + gap)
        parts.append(f'<rect x="{x}" y="{height - h + 10:.1f}" width="{bar}" height="{h:.1f}" fill="#457b9d">'
                     f"<title>{html.escape(label)}: {value} tokens</title></rect>")
        parts.append(f'<text x="{x + bar / 2}" y="{height - h + 4:.1f}" font-size="11" text-anchor="middle">'
                     f"{value}</text>")
        parts.append(f'<text x="{x + bar / 2}" y="{height + 26}" font-size="10" text-anchor="middle">'
                     f"{html.escape(label[:14])}</text>")
    parts.append("</svg>")
    return "".join(parts)


def _loss_html(context: Context) -> str:
    found = context.state.get(LossReport)
    if found is None:
        return '<p class="muted" id="loss">No loss validator (such as validate.loss) in this pipeline.</p>'
    loss: Mapping[str, Any] = thaw(found.values)
    css = "ok" if loss.get("passed", True) else "bad"
    lost = loss.get("lost") or []
    listed = "".join(f"<li>{html.escape(str(item))}</li>" for item in list(lost)[:50])
    return (f'<div id="loss"><p class="{css}">Retention {float(loss.get("retention", 0)):.3f}, level '
            f'<b>{html.escape(str(loss.get("level")))}</b></p>'
            + (f"<p>Lost items (first 50):</p><ul>{listed}</ul>" if listed else "")
            + "<details><summary>All figures</summary>"
            f"<pre>{html.escape(json.dumps(loss, indent=2, default=str))}</pre></details></div>")


def html_report(context: Context, title: str = "compactor report") -> str:
    """The whole report as one HTML document."""
    kept = _kept_ids(context)
    by_source: dict[str, list[Chunk]] = {}
    for chunk in context.chunks:
        by_source.setdefault(chunk.source_id, []).append(chunk)
    sources = "".join(_source_html(s, by_source.get(s.id, []), kept, n)
                      for n, s in enumerate(context.sources))
    tokens_in = context.input_tokens
    summary = (f"{len(context.sources)} source(s), {len(context.chunks)} chunks, {len(kept)} kept · "
               f"{tokens_in} → {context.output_tokens} tokens · budget {context.resolved_budget()}"
               + (f" · query: {html.escape(context.query)}" if context.query else ""))
    return ("<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<meta name=\"viewport\" content=\"width=device-width,initial-scale=1\">"
            f"<title>{html.escape(title)}</title><style>{_STYLE}</style></head><body><header><h1>{html.escape(title)}</h1>"
            f"<div>{summary}</div></header><main>"
            '<section><h2>Sources</h2><p class="legend"><span><mark class="kept">kept</mark></span>'
            '<span><span class="dropped">dropped</span></span><span class="muted">hover a chunk for its '
            f"scores</span></p>{sources}</section>"
            f"<section><h2>Steps</h2>{_steps_html(context)}</section>"
            f"<section><h2>Tokens per step</h2>{_plot_svg(context)}</section>"
            f"<section><h2>Loss</h2>{_loss_html(context)}</section>"
            f"</main><script>{_SCRIPT}</script></body></html>")
