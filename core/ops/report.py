"""A compression report a person reads: one self-contained HTML file (no network, no script library).

From the top: the output itself; two plots where looking beats reading (tokens through the steps, and
the chunk scores with the cut line, as inline SVG); then per source what was kept and what was dropped
and why (the step's decision or the label that cut it) with the scores as text, sources with nothing
kept collapsed; then the step table and the run's `LossReport` (from `validate.loss`). The page fits a
laptop screen without horizontal scrolling and works without script (a few lines page long sources).

    compactor-run qa notes.txt --query "..." --report report.html
"""

from __future__ import annotations

import bisect
import html
import json
import unicodedata
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from compactor.components import score_label
from compactor.document import Chunk, Context, Source, StepReport
from compactor.state import LossReport, thaw

#: Chunks per page of a source's text view (and rows per chunk table); sources with something kept
#: that are open when the page loads (the first ones; the others, and all with nothing kept, closed).
PAGE = 200
OPEN_SOURCES = 3
#: Share of a chunk's text in the output from which it counts as kept whole.
WHOLE = 0.98
#: Characters of a dropped chunk shown in its table row (the text view shows all of it).
PREVIEW = 400

_SANS = ('system-ui,-apple-system,"Segoe UI",Roboto,"Noto Sans","Helvetica Neue",Arial,"Noto Sans CJK SC",'
         '"Source Han Sans SC","PingFang SC","Hiragino Sans GB","Microsoft YaHei","WenQuanYi Micro Hei",'
         '"WenQuanYi Zen Hei",sans-serif')
_MONO = ('ui-monospace,SFMono-Regular,Menlo,Consolas,"Liberation Mono","Noto Sans Mono CJK SC",'
         '"Noto Sans CJK SC","Microsoft YaHei","WenQuanYi Micro Hei Mono",monospace')

_STYLE = f"""
*{{box-sizing:border-box}}
body{{font:15px/1.55 {_SANS};margin:0;color:#1d232a;background:#f4f6f8;overflow-wrap:anywhere}}
header{{background:#1d3557;color:#fff;padding:10px 20px}}header h1{{margin:0 0 2px;font-size:19px}}
header .summary{{font-size:14px;color:#dfe7f0}}
main{{padding:12px 20px;max-width:1260px;margin:0 auto}}
section{{background:#fff;border:1px solid #dde1e6;border-radius:6px;padding:10px 16px;margin:0 0 14px}}
h2{{font-size:17px;margin:2px 0 8px}}h3{{font-size:15px;margin:10px 0 4px}}
details>summary{{cursor:pointer;margin:4px 0}}details.source{{border-top:1px solid #eceff3;padding:4px 0}}
details.source>summary{{font-weight:600}}
pre.output{{white-space:pre-wrap;font:15px/1.6 {_SANS};margin:4px 0 0;padding:10px 12px;
max-height:min(48vh,520px);overflow:auto;background:#fbfcfd;border:1px solid #e3e7eb;border-radius:4px}}
.plots{{display:grid;grid-template-columns:repeat(auto-fit,minmax(min(440px,100%),1fr));gap:12px 24px}}
figure{{margin:0;min-width:0}}figcaption{{font-weight:600;margin:0 0 4px}}
svg{{max-width:100%;height:auto;display:block;font-family:{_SANS}}}
table{{border-collapse:collapse;width:100%;table-layout:fixed}}
th,td{{text-align:left;vertical-align:top;padding:4px 8px;border-bottom:1px solid #eceff3}}
th{{font-size:13px;color:#4a545e;font-weight:600}}
td.n,th.n{{text-align:right;font-variant-numeric:tabular-nums}}
table.chunks td{{font-size:14px}}table.chunks .clip{{display:-webkit-box;-webkit-line-clamp:4;
-webkit-box-orient:vertical;overflow:hidden}}
.score b{{font-variant-numeric:tabular-nums}}.score small{{display:block;color:#6b7580;line-height:1.35}}
.badge{{display:inline-block;border-radius:3px;padding:0 5px;font-size:12px;font-weight:600;
white-space:nowrap}}
.badge.kept{{background:#d6f5dc;color:#1e6b32}}.badge.partial{{background:#e9f7d2;color:#4b6b12}}
.badge.dropped{{background:#eceff3;color:#56606a}}.badge.quarantined{{background:#fbe0dd;color:#a3261b}}
.text{{white-space:pre-wrap;font:13px/1.55 {_MONO};max-height:60vh;overflow:auto}}
mark.kept{{background:#c9f2d0;border-bottom:2px solid #2e9e48;color:inherit}}
.chunk.dropped,.chunk.quarantined,.cut,span.gap{{color:#8a939d}}.chunk.quarantined{{text-decoration:line-through}}
.muted{{color:#6b7580}}.bad{{color:#b3261e}}.ok{{color:#2e7d32}}.pager button{{margin:6px 4px 0 0}}
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


@dataclass(frozen=True)
class Verdict:
    """What became of one chunk: `kept`, `partial`, `dropped` or `quarantined`, why, and the share of
    its text that is in the output."""

    status: str
    reason: str
    share: float

    @property
    def kept(self) -> bool:
        return self.status in ("kept", "partial")


def _kept_ids(context: Context) -> set[str]:
    return {cid for segment in context.segments for cid in segment.chunk_ids}


def _kept_spans(context: Context) -> dict[str, list[tuple[int, int]]]:
    """The verbatim spans of each source's text that are in the output (sources whose segments say)."""
    spans: dict[str, list[tuple[int, int]]] = {}
    for segment in context.segments:
        for source_id, start, end in segment.spans:
            spans.setdefault(source_id, []).append((start, end))
    return {sid: sorted(found) for sid, found in spans.items()}


def _overlap(spans: list[tuple[int, int]], start: int, end: int) -> int:
    """Characters of `[start, end)` inside the sorted, disjoint `spans`."""
    total = 0
    i = max(0, bisect.bisect_right(spans, (start, start)) - 1)
    while i < len(spans) and spans[i][0] < end:
        total += max(0, min(end, spans[i][1]) - max(start, spans[i][0]))
        i += 1
    return total


def _decisions(context: Context) -> dict[str, str]:
    """Each chunk's decision as its step wrote it (`compress.select: dropped (rank 9, no room left)`)."""
    found: dict[str, str] = {}
    for report in context.reports:
        decisions = report.details.get("decisions")
        if isinstance(decisions, Mapping):
            found.update({str(cid): f"{report.step}: {text}" for cid, text in decisions.items()})
    return found


def _injection(chunk: Chunk) -> str | None:
    finding = chunk.labels.get("injection")
    if not finding:
        return None
    rules = finding.get("rules") if isinstance(finding, Mapping) else None
    named = f" ({', '.join(map(str, rules))})" if rules else ""
    return f"classify.injection: prompt injection{named}"


def verdicts(context: Context) -> dict[str, Verdict]:
    """Every chunk's verdict. Where segments carry verbatim spans the output decides (a chunk a step
    kept can still be cut, as an injection is); elsewhere a segment naming the chunk means kept."""
    spans = _kept_spans(context)
    named = _kept_ids(context)
    decisions = _decisions(context)
    out: dict[str, Verdict] = {}
    for chunk in context.chunks:
        decision = decisions.get(chunk.id)
        injected = _injection(chunk)
        if chunk.source_id in spans:
            body = chunk.text.strip()
            lead = len(chunk.text) - len(chunk.text.lstrip())
            start = chunk.start + lead
            share = _overlap(spans[chunk.source_id], start, start + len(body)) / len(body) if body else 0.0
        else:
            share = 1.0 if chunk.id in named else 0.0
        if share >= WHOLE:
            status, why = "kept", decision or "in the output"
        elif share > 0:
            status = "partial"
            why = f"{decision or 'in the output'}; {share:.0%} of its text kept"
            if injected:
                why += f"; the rest cut by {injected}"
        elif injected:
            status, why = "quarantined", f"cut by {injected}" + (f"; {decision}" if decision else "")
        else:
            status = "dropped"
            why = decision or "not in the output"
            if decision and ": kept" in decision:
                why += ", but its text is not in the output (merged or repeated)"
        out[chunk.id] = Verdict(status, why, min(share, 1.0))
    return _after_render(context, out, spans)


def render_cut(context: Context) -> StepReport | None:
    """The render step that cut the kept text to fit the budget, if one did."""
    cuts = [r for r in context.reports
            if r.stage == "render" and not r.skipped and r.tokens_out < r.tokens_in]
    return cuts[-1] if cuts else None


def _kept_text(chunk: Chunk, spans: list[tuple[int, int]] | None) -> str:
    """The words of a chunk that its segments carry (all of it without spans), spaces collapsed."""
    if spans is None:
        return " ".join(chunk.text.split())
    pieces = [chunk.text[max(a, chunk.start) - chunk.start:min(b, chunk.end) - chunk.start]
              for a, b in spans if a < chunk.end and b > chunk.start]
    return " ".join(" ".join(pieces).split())


def _after_render(context: Context, found: dict[str, Verdict],
                  spans: Mapping[str, list[tuple[int, int]]]) -> dict[str, Verdict]:
    """Verdicts corrected by what the output holds when a render step cut the kept text to the budget:
    a chunk whose words are not in the output was cut there, one whose start is, partly."""
    step = render_cut(context)
    if step is None or not context.output:
        return found
    output = " ".join(context.output.split())
    cut = f"{step.step}: cut to fit the budget ({step.tokens_in:,} → {step.tokens_out:,} tokens)"
    changed: dict[str, Verdict] = {}
    seen = False
    for chunk in context.chunks:
        verdict = found[chunk.id]
        words = _kept_text(chunk, spans.get(chunk.source_id)) if verdict.kept else ""
        if not words:
            continue
        if words in output:
            seen = True
            continue
        low, high = 0, len(words)  # the longest start of its words in the output (a prefix test is monotone)
        if words[:30] not in output:
            high = 0  # most chunks cut by the render step: one search each
        while low < high:
            middle = (low + high + 1) // 2
            low, high = (middle, high) if words[:middle] in output else (low, middle - 1)
        before = "kept until rendering" if verdict.reason == "in the output" else verdict.reason
        if low >= min(30, len(words)):
            seen = True
            share = verdict.share * low / len(words)
            changed[chunk.id] = Verdict("partial", f"{before}; {share:.0%} of it left by {cut}", share)
        else:
            changed[chunk.id] = Verdict("dropped", f"{before}; then {cut}", 0.0)
    # none of the kept words found as they are: the output is written in another form (JSON), leave it
    return {**found, **changed} if seen else found


def primary_score(chunks: Sequence[Chunk]) -> str | None:
    """The score chunks were ranked by: `combined` when scorers ran, else the most common one."""
    counts: dict[str, int] = {}
    for chunk in chunks:
        for key in chunk.scores:
            counts[key] = counts.get(key, 0) + 1
    if not counts:
        return None
    if "combined" in counts:
        return "combined"
    return max(sorted(counts), key=lambda k: counts[k])


def cut_score(chunks: Sequence[Chunk], found: Mapping[str, Verdict], key: str) -> float | None:
    """Where selection stopped: the lowest score of a chunk in the output."""
    kept = [c.scores[key] for c in chunks if key in c.scores and found[c.id].kept]
    return min(kept) if kept else None


# -- text measures for SVG labels (no browser to ask): wide characters count double -----------------------

def text_width(text: str, size: float) -> float:
    """A generous estimate of a label's width in px at `size` (so a label never leaves its box)."""
    return sum(size * (1.05 if unicodedata.east_asian_width(ch) in "WF" else 0.62) for ch in text)


def _short(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit - 1] + "…"


def step_label(step: str) -> str:
    """A step's name for a plot: a group's shared prefix said once (`score.relevance+density`)."""
    parts = step.split("+")
    prefix = parts[0].split(".", 1)[0] + "."
    if len(parts) > 1 and all(p.startswith(prefix) for p in parts):
        return prefix + "+".join(p.removeprefix(prefix) for p in parts)
    return step


def _svg_text(x: float, y: float, text: str, *, size: int = 12, anchor: str = "start", fill: str = "#1d232a",
              weight: str = "normal", full: str | None = None) -> str:
    tip = f"<title>{html.escape(full)}</title>" if full and full != text else ""
    return (f'<text x="{x:.1f}" y="{y:.1f}" font-size="{size}" text-anchor="{anchor}" fill="{fill}" '
            f'font-weight="{weight}">{tip}{html.escape(text)}</text>')


def tokens_svg(context: Context) -> str:
    """Tokens after each step as horizontal bars, names on the left (never clipped), values at the ends."""
    reports = list(context.reports)
    if not reports:
        return '<p class="muted">No steps ran.</p>'
    rows: list[tuple[str, str, int, str]] = [("input", "input", reports[0].tokens_in, "#457b9d")]
    for r in reports:
        colour = "#c8ced4" if r.skipped else "#1d3557" if r.tokens_out < r.tokens_in else "#8fb3d1"
        name = step_label(r.step) + (" (skipped)" if r.skipped else "")
        rows.append((_short(name, 34), r.step, r.tokens_out, colour))
    top = max(v for _, _, v, _ in rows) or 1
    values = [f"{v:,}" + (f" ({(v - rows[i - 1][2]) / rows[i - 1][2]:+.0%})" if i and rows[i - 1][2] and
                          v != rows[i - 1][2] else "") for i, (_, _, v, _) in enumerate(rows)]
    width, size, row, bar = 560, 12, 24, 16
    label_w = max(text_width(label, size) for label, *_ in rows) + 10
    value_w = max(text_width(v, size) for v in values) + 10
    span = max(60.0, width - label_w - value_w - 8)
    width = int(label_w + span + value_w + 8)
    height = 10 + row * len(rows)
    parts = [f'<svg id="plot" class="plot-tokens" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} '
             f'{height}" width="{width}" height="{height}" role="img" aria-label="tokens after each step">']
    for i, ((label, full, value, colour), shown) in enumerate(zip(rows, values, strict=True)):
        y = 6 + i * row
        w = max(1.0, span * value / top)
        parts.append(f'<rect x="{label_w:.1f}" y="{y}" width="{w:.1f}" height="{bar}" fill="{colour}">'
                     f"<title>{html.escape(full)}: {value} tokens</title></rect>")
        parts.append(_svg_text(label_w - 6, y + 12.5, label, size=size, anchor="end", full=full))
        parts.append(_svg_text(label_w + w + 5, y + 12.5, shown, size=size))
    parts.append("</svg>")
    return "".join(parts)


def scores_svg(context: Context, found: Mapping[str, Verdict], bins: int = 20) -> str:
    """A histogram of chunk scores, kept / dropped / quarantined stacked, and the cut line."""
    chunks = list(context.chunks)
    key = primary_score(chunks)
    scored = [c for c in chunks if key is not None and key in c.scores]
    if key is None or not scored:
        return '<p class="muted" id="scores">No chunk scores in this run (no score step).</p>'
    values = [float(c.scores[key]) for c in scored]
    lo, hi = min(values), max(values)
    if lo >= 0 and hi <= 1:
        lo, hi = 0.0, 1.0
    if hi - lo < 1e-9:
        lo, hi = lo - 0.5, hi + 0.5
    kinds = ("kept", "dropped", "quarantined")
    colours = {"kept": "#2e9e48", "dropped": "#aeb6bf", "quarantined": "#c0392b"}
    counts = [{k: 0 for k in kinds} for _ in range(bins)]
    for chunk, value in zip(scored, values, strict=True):
        b = min(bins - 1, int((value - lo) / (hi - lo) * bins))
        verdict = found[chunk.id]
        counts[b]["kept" if verdict.kept else verdict.status] += 1
    totals = {k: sum(c[k] for c in counts) for k in kinds}
    width, height, left, right, top, bottom = 560.0, 250.0, 44.0, 14.0, 34.0, 44.0
    plot_w, plot_h = width - left - right, height - top - bottom
    most = max(sum(c.values()) for c in counts) or 1
    step = plot_w / bins

    def x_of(value: float) -> float:
        return left + (value - lo) / (hi - lo) * plot_w

    parts = [f'<svg id="scores" class="plot-scores" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} '
             f'{height}" width="{width}" height="{height}" role="img" '
             f'aria-label="{html.escape(score_label(key))} scores of the chunks and the cut">']
    for b, count in enumerate(counts):
        y = top + plot_h
        for kind in kinds:
            if count[kind]:
                h = plot_h * count[kind] / most
                y -= h
                parts.append(f'<rect class="bin {kind}" x="{left + b * step + 1:.1f}" y="{y:.1f}" '
                             f'width="{step - 2:.1f}" height="{h:.1f}" fill="{colours[kind]}"><title>'
                             f"{lo + b * (hi - lo) / bins:.2f}–{lo + (b + 1) * (hi - lo) / bins:.2f}: "
                             f"{count[kind]} {kind}</title></rect>")
    base = top + plot_h
    parts.append(f'<line x1="{left}" y1="{base}" x2="{left + plot_w}" y2="{base}" stroke="#6b7580"/>')
    parts.append(f'<line x1="{left}" y1="{top}" x2="{left}" y2="{base}" stroke="#6b7580"/>')
    for count_tick in sorted({0, most // 2, most}):
        y = base - plot_h * count_tick / most
        parts.append(_svg_text(left - 5, y + 4, str(count_tick), size=11, anchor="end", fill="#4a545e"))
    for value, anchor in ((lo, "start"), ((lo + hi) / 2, "middle"), (hi, "end")):
        parts.append(_svg_text(x_of(value), base + 15, f"{value:.2f}", size=11, anchor=anchor,
                               fill="#4a545e"))
    parts.append(_svg_text(left + plot_w / 2, height - 8, f"{score_label(key)} score (chunks per bin)",
                           size=12, anchor="middle", fill="#4a545e"))
    x = 6.0
    for kind in kinds:
        if kind == "quarantined" and not totals[kind]:
            continue
        label = f"{kind} {totals[kind]}"
        parts.append(f'<rect x="{x:.1f}" y="8" width="11" height="11" fill="{colours[kind]}"/>')
        parts.append(_svg_text(x + 15, 18, label, size=12))
        x += 15 + text_width(label, 12) + 14
    cut = cut_score(scored, found, key)
    if cut is not None:
        cx = x_of(cut)
        parts.append(f'<line class="cut" x1="{cx:.1f}" y1="{top - 4}" x2="{cx:.1f}" y2="{base}" '
                     f'stroke="#d35400" stroke-width="2" stroke-dasharray="5 3"/>')
        label = f"cut {cut:.3f}"
        anchor, lx = ("start", cx + 5) if cx + 5 + text_width(label, 12) <= width - 2 else ("end", cx - 5)
        parts.append(_svg_text(lx, top + 8, label, size=12, anchor=anchor, fill="#d35400", weight="bold",
                               full=f"cut {cut:.3f}: the lowest {score_label(key)} score in the output"))
    parts.append("</svg>")
    return "".join(parts)


# -- sources --------------------------------------------------------------------------------------------

def _scores_cell(chunk: Chunk, key: str | None) -> str:
    others = " · ".join(f"{score_label(k)} {v:.3f}" for k, v in sorted(chunk.scores.items()) if k != key)
    main = '<span class="muted">no score</span>'
    if key is not None and key in chunk.scores:
        name = html.escape(score_label(key))
        main = f'<b>{float(chunk.scores[key]):.3f}</b> <span class="muted">{name}</span>'
    return f'<td class="score">{main}{f"<small>{html.escape(others)}</small>" if others else ""}</td>'


def _labels(chunk: Chunk) -> str:
    shown = [f"{k}={v}" for k, v in sorted(chunk.labels.items())
             if k in ("type", "language") and isinstance(v, str | int | float | bool)]
    return f'<small class="muted">{html.escape(" · ".join(shown))}</small>' if shown else ""


def _marked(text: str, offset: int, spans: list[tuple[int, int]] | None) -> str:
    """`text` (at `offset` in its source) with the parts in the output marked and the rest dimmed."""
    if spans is None:
        return f'<mark class="kept">{html.escape(text)}</mark>'
    out, position, end = [], offset, offset + len(text)
    i = max(0, bisect.bisect_right(spans, (offset, offset)) - 1)
    while i < len(spans) and spans[i][0] < end:
        a, b = max(offset, spans[i][0]), min(end, spans[i][1])
        if b > a:
            if a > position:
                out.append(f'<span class="cut">{html.escape(text[position - offset:a - offset])}</span>')
            out.append(f'<mark class="kept">{html.escape(text[a - offset:b - offset])}</mark>')
            position = b
        i += 1
    if position < end:
        out.append(f'<span class="cut">{html.escape(text[position - offset:])}</span>')
    return "".join(out)


def _chunk_rows(chunks: list[Chunk], found: Mapping[str, Verdict], key: str | None,
                spans: list[tuple[int, int]] | None) -> str:
    rows = []
    for chunk in chunks[:PAGE]:
        verdict = found[chunk.id]
        if verdict.kept:
            body = _marked(chunk.text, chunk.start, spans)
        else:
            body = html.escape(_short(chunk.text.strip(), PREVIEW))
        rows.append(f'<tr data-chunk="{html.escape(chunk.id)}" class="{verdict.status}">'
                    f'<td><span class="badge {verdict.status}">{verdict.status}</span><br>'
                    f'<small class="muted">{chunk.tokens} tokens</small></td>{_scores_cell(chunk, key)}'
                    f'<td class="why">{html.escape(verdict.reason)}<br>{_labels(chunk)}</td>'
                    f'<td><div class="clip">{body}</div></td></tr>')
    more = (f'<p class="muted">{len(chunks) - PAGE} more not listed; the text view shows them all.</p>'
            if len(chunks) > PAGE else "")
    return ('<table class="chunks"><colgroup><col style="width:116px"><col style="width:190px">'
            '<col style="width:26%"><col></colgroup><thead><tr><th>chunk</th><th>score</th><th>why</th>'
            f"<th>text</th></tr></thead><tbody>{''.join(rows)}</tbody></table>{more}")


def _chunk_title(chunk: Chunk, verdict: Verdict) -> str:
    scores = ", ".join(f"{score_label(k)}={v:.3f}" for k, v in sorted(chunk.scores.items()))
    parts = [f"{chunk.id} ({verdict.status}, {chunk.tokens} tokens)", verdict.reason]
    if scores:
        parts.append(f"scores: {scores}")
    return "\n".join(parts)


def _text_view(source: Source, chunks: list[Chunk], found: Mapping[str, Verdict],
               spans: list[tuple[int, int]] | None) -> str:
    """The source's text, chunk by chunk, a page of chunks at a time."""
    text = source.text
    pages: list[list[str]] = [[]]
    position = 0
    for n, chunk in enumerate(chunks):
        if n and n % PAGE == 0:
            pages.append([])
        start = max(chunk.start, position)  # overlapping windows: show each character once
        if start > position:
            pages[-1].append(f'<span class="gap">{html.escape(text[position:start])}</span>')
        if chunk.end > start:
            verdict = found[chunk.id]
            piece = text[start:chunk.end]
            body = _marked(piece, start, spans) if verdict.kept else html.escape(piece)
            title = html.escape(_chunk_title(chunk, verdict), quote=True)
            pages[-1].append(f'<span class="chunk {verdict.status}" data-chunk="{html.escape(chunk.id)}" '
                             f'title="{title}">{body}</span>')
            position = chunk.end
    if position < len(text):
        pages[-1].append(f'<span class="gap">{html.escape(text[position:])}</span>')
    blocks = "".join(f'<div class="text page" data-page="{i}"{" hidden" if i else ""}>{"".join(p)}</div>'
                     for i, p in enumerate(pages))
    pager = ""
    if len(pages) > 1:
        pager = '<div class="pager">' + "".join(
            f'<button data-page="{i}">chunks {i * PAGE + 1}-{min((i + 1) * PAGE, len(chunks))}</button>'
            for i in range(len(pages))) + "</div>"
    return (f'<details class="textview"><summary>The text, kept parts marked</summary>{pager}{blocks}'
            "</details>")


def _source_html(context: Context, source: Source, chunks: list[Chunk], found: Mapping[str, Verdict],
                 spans: list[tuple[int, int]] | None, open_: bool, key: str | None) -> str:
    chunks = sorted(chunks, key=lambda c: (c.start, c.end))
    kept = [c for c in chunks if found[c.id].kept]
    dropped = sorted((c for c in chunks if not found[c.id].kept),
                     key=lambda c: (-(c.scores.get(key, 0.0) if key else 0.0), c.start))
    quarantined = sum(found[c.id].status == "quarantined" for c in chunks)
    out_tokens = sum(s.tokens or 0 for s in context.segments if s.source_id == source.id)
    if render_cut(context) or not out_tokens:  # segments hold more than the output: estimate
        out_tokens = sum(round(c.tokens * found[c.id].share) for c in kept)
    name = html.escape(source.title or source.uri or source.id)
    summary = (f'<summary><span class="name">{name}</span> <span class="muted">· '
               f"{html.escape(source.kind)} · "
               f"{source.tokens or 0:,} → {out_tokens:,} tokens · </span>"
               f'<span class="{"ok" if kept else "muted"}">{len(kept)} kept</span><span class="muted"> · '
               f"{len(dropped)} dropped" + (f" ({quarantined} quarantined)" if quarantined else "")
               + f" of {len(chunks)} chunks</span></summary>")
    body = []
    if kept:
        body.append(f"<h3>Kept ({len(kept)}), in their order</h3>{_chunk_rows(kept, found, key, spans)}")
    if dropped:
        opened = "" if kept else " open"
        body.append(f'<details class="dropped"{opened}><summary>Dropped ({len(dropped)}), highest score first'
                    f"</summary>{_chunk_rows(dropped, found, key, spans)}</details>")
    if not chunks:
        body.append('<p class="muted">Not chunked by this pipeline.</p>')
    body.append(_text_view(source, chunks, found, spans))
    opened = " open" if open_ else ""
    return (f'<details class="source" data-source="{html.escape(source.id)}"{opened}>{summary}'
            f'{"".join(body)}</details>')


# -- steps, loss, output ---------------------------------------------------------------------------------

def _notes(report: StepReport) -> str:
    """A step's short figures (`kept_chunks=9 · budget=150`); long ones stay in the JSON report."""
    shown = []
    for name, value in report.details.items():
        if name == "decisions":
            continue
        if isinstance(value, str | int | float | bool):
            shown.append(f"{name}={_short(str(value), 60)}")
        elif isinstance(value, list | tuple):
            shown.append(f"{name}: {len(value)}")
    shown.extend(f"warning: {_short(w, 120)}" for w in report.warnings)
    return html.escape(" · ".join(shown[:8]))


def _steps_html(context: Context) -> str:
    rows = []
    for r in context.reports:
        step = html.escape(r.step).replace("+", "+<wbr>")  # a group's name breaks between its steps
        rows.append(f"<tr><td>{r.index}</td><td>{step}</td><td>{html.escape(r.stage)}</td>"
                    f'<td class="n">{r.tokens_in:,}</td><td class="n">{r.tokens_out:,}</td>'
                    f'<td class="n">{r.seconds * 1000:.1f}</td>'
                    f'<td><small>{"skipped · " if r.skipped else ""}{_notes(r)}</small></td></tr>')
    widths = "".join(f'<col style="width:{w}">' for w in ("36px", "24%", "100px", "96px", "96px", "70px"))
    return (f'<table id="steps"><colgroup>{widths}<col></colgroup>'
            '<thead><tr><th>#</th><th>step</th><th>stage</th><th class="n">tokens in</th>'
            '<th class="n">tokens out</th><th class="n">ms</th><th>notes</th></tr></thead><tbody>'
            + "".join(rows) + "</tbody></table>")


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
            f'<pre class="text">{html.escape(json.dumps(loss, indent=2, default=str, ensure_ascii=False))}'
            "</pre></details></div>")


def output_text(context: Context) -> str:
    """What the run gave back: the rendered output, else its segments' text."""
    if context.output is not None:
        return context.output
    return "\n\n".join(s.text for s in context.segments)


def _output_html(context: Context) -> str:
    text = output_text(context)
    tokens = context.output_tokens
    figures = f"{tokens:,} tokens · " if tokens is not None else ""
    lines = text.count("\n") + 1
    body = (f'<pre class="output" id="output-text">{html.escape(text)}</pre>' if text.strip() else
            '<p class="bad" id="output-text">The output is empty: nothing of the input was kept.</p>')
    return (f'<section id="output-section"><details id="output" open><summary><h2 style="display:inline">'
            f'Output</h2> <span class="muted">{figures}{lines:,} lines · {len(text):,} characters</span>'
            f"</summary>{body}</details></section>")


def html_report(context: Context, title: str = "compactor report") -> str:
    """The whole report as one HTML document."""
    found = verdicts(context)
    spans = _kept_spans(context)
    key = primary_score(context.chunks)
    by_source: dict[str, list[Chunk]] = {}
    for chunk in context.chunks:
        by_source.setdefault(chunk.source_id, []).append(chunk)
    opened = [s.id for s in context.sources if any(found[c.id].kept for c in by_source.get(s.id, ()))]
    sources = "".join(_source_html(context, s, by_source.get(s.id, []), found, spans.get(s.id),
                                   s.id in opened[:OPEN_SOURCES], key) for s in context.sources)
    kept = sum(v.kept for v in found.values())
    tokens_in, tokens_out = context.input_tokens, context.output_tokens
    share = f" ({tokens_out / tokens_in:.0%} of the input)" if tokens_in and tokens_out is not None else ""
    summary = (f"{len(context.sources):,} source(s) · {len(context.chunks):,} chunks: {kept:,} kept, "
               f"{len(context.chunks) - kept:,} dropped · {tokens_in:,} → "
               f"{'-' if tokens_out is None else f'{tokens_out:,}'} tokens{share} · "
               f"budget {context.resolved_budget()}"
               + (f" · query: {html.escape(context.query)}" if context.query else ""))
    return ("<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<meta name=\"viewport\" content=\"width=device-width,initial-scale=1\">"
            f"<title>{html.escape(title)}</title><style>{_STYLE}</style></head><body><header>"
            f"<h1>{html.escape(title)}</h1><div class=\"summary\">{summary}</div></header><main>"
            f"{_output_html(context)}"
            '<section id="glance"><h2>At a glance</h2><div class="plots">'
            f"<figure><figcaption>Tokens through the steps</figcaption>{tokens_svg(context)}</figure>"
            "<figure><figcaption>Chunk scores: kept, dropped and the cut</figcaption>"
            f"{scores_svg(context, found)}</figure></div></section>"
            '<section id="sources"><h2>Sources: what was kept, what was dropped and why</h2>'
            f"{sources}</section>"
            f"<section><h2>Steps</h2>{_steps_html(context)}</section>"
            f"<section><h2>Loss</h2>{_loss_html(context)}</section>"
            f"</main><script>{_SCRIPT}</script></body></html>")
