"""Main-content extraction from HTML pages, standard library only.

Why: web pages handed to an agent are mostly site chrome (menus, share bars, cookie banners,
related links). Keeping only the article body saves most of the tokens while keeping the
text a reader came for. The approach is Readability-like:

1. a forgiving tree builder on top of :mod:`html.parser` (implied end tags, depth cap,
   dropped elements such as scripts, navigation and hidden nodes);
2. every run of inline text of at least a few words scores its nearest containers by
   length, commas (Chinese punctuation included) and link density, nudged by class/id hints;
3. the best container, plus the siblings that score well, is turned into typed blocks while
   boilerplate sub-trees (share bars, related links, link lists, ...) are cleaned away.

Nothing here raises on bad input: empty or unparsable HTML gives ``Extracted(None, (), "")``.
"""

from __future__ import annotations

import colorsys
import re
from collections.abc import Sequence
from dataclasses import dataclass
from html.parser import HTMLParser

from compactor.text.language import CJK_RANGES

__all__ = ["Block", "Extracted", "extract_main_text"]


@dataclass(frozen=True, slots=True)
class Block:
    """One unit of extracted text; kinds let callers render or weight content differently."""

    kind: str  # "heading" | "paragraph" | "list_item" | "table_row" | "pre" | "quote"
    text: str
    level: int = 0  # heading level 1-6, else 0


@dataclass(frozen=True, slots=True)
class Extracted:
    """The result: page title, the main-content blocks and their plain-text rendering."""

    title: str | None
    blocks: tuple[Block, ...]
    text: str


EMPTY = Extracted(None, (), "")

# --------------------------------------------------------------------------- tag tables


def _tags(names: str) -> frozenset[str]:
    return frozenset(names.split())


_VOID = _tags("area base br col embed hr img input keygen link meta param source track wbr")
# Never content: their whole sub-tree is ignored.
_DROP = _tags(
    "script style noscript template svg nav header footer aside button iframe object "
    "embed canvas select option optgroup textarea input label dialog head title audio "
    "video map frameset frame applet menu"
)
_BLOCK = _tags(
    "address article aside blockquote body center dd details dialog dir div dl dt "
    "fieldset figcaption figure footer form h1 h2 h3 h4 h5 h6 header hgroup hr html li "
    "main menu nav ol p pre section summary table tbody td tfoot th thead tr ul caption "
    "legend html #root"
)
# Elements that are themselves a paragraph: their text scores their parent.
_PARA = _tags("p pre td th li dd dt h1 h2 h3 h4 h5 h6 figcaption caption address")
_HEADINGS = {f"h{i}": i for i in range(1, 7)}
_HEAD_OK = _tags("title meta link script style base noscript template")
# Elements that close an open <p> when they start.
_CLOSES_P = _tags(
    "address article aside blockquote center details dialog dir div dl fieldset "
    "figcaption figure footer form h1 h2 h3 h4 h5 h6 header hgroup hr main menu nav ol p "
    "pre section summary table ul"
)
_SCOPE = _tags("table td th caption html template button object marquee applet")
_TABLE_SCOPE = frozenset(("table", "html", "template"))
_IMPLIED_CLOSE: dict[str, tuple[frozenset[str], frozenset[str]]] = {
    # tag: (tags it closes, tags that stop the search)
    "li": (frozenset(("li",)), frozenset(("ul", "ol", "menu", "table", "html"))),
    "dt": (frozenset(("dt", "dd")), frozenset(("dl", "table", "html"))),
    "dd": (frozenset(("dt", "dd")), frozenset(("dl", "table", "html"))),
    "tr": (frozenset(("tr", "td", "th")), _TABLE_SCOPE),
    "td": (frozenset(("td", "th")), frozenset(("tr", "table", "html"))),
    "th": (frozenset(("td", "th")), frozenset(("tr", "table", "html"))),
    "thead": (frozenset(("thead", "tbody", "tfoot", "tr", "td", "th")), _TABLE_SCOPE),
    "tbody": (frozenset(("thead", "tbody", "tfoot", "tr", "td", "th")), _TABLE_SCOPE),
    "tfoot": (frozenset(("thead", "tbody", "tfoot", "tr", "td", "th")), _TABLE_SCOPE),
    "option": (frozenset(("option",)), frozenset(("select", "html"))),
    "a": (frozenset(("a",)), _SCOPE),
}
_MAX_DEPTH = 180  # keeps the recursive passes far from the interpreter's recursion limit
_SCAN = 40  # how far down the open-element stack implied-close searches look

# --------------------------------------------------------------------------- text tables

_WS_RE = re.compile(r"[\s\u200b\u200c\u200d\ufeff]+")
_CJK_RE = re.compile(f"[{CJK_RANGES}]")
_COMMA_RE = re.compile("[,\u060c\ufe50\ufe10\ufe11\u2e41\u2e34\u2e32\uff0c\u3001\u3002\uff1b]")
_CJK_WEIGHT = 2  # extra length credited per CJK character: one carries about a word
_MIN_UNIT = 25  # shortest text run that counts as a paragraph when scoring

# --------------------------------------------------------------------------- class/id hints

_UNLIKELY_RE = re.compile(
    r"-ad-|ai2html|banner|breadcrumb|combx|comment|community|cover-wrap|disqus|extra|footer|"
    r"gdpr|header|legends|menu|related|remark|replies|rss|shoutbox|sidebar|skyscraper|social|"
    r"sponsor|supplemental|ad-break|agegate|pagination|pager|popup|yom-remote|cookie|"
    r"newsletter|outbrain|taboola"
)
_MAYBE_RE = re.compile(r"and|article|body|column|content|main|mathjax|shadow")
_POSITIVE_RE = re.compile(
    r"article|body|content|entry|hentry|h-entry|main|page|pagination|post|text|blog|story"
)
_NEGATIVE_RE = re.compile(
    r"-ad-|hidden|^hid$| hid$| hid |^hid |banner|combx|comment|com-|contact|foot|footer|"
    r"footnote|gdpr|masthead|media|meta|outbrain|promo|related|scroll|share|shoutbox|sidebar|"
    r"skyscraper|sponsor|shopping|tags|tool|widget|byline|author|dateline|caption|credit|"
    r"newsletter|subscribe|cookie|social|breadcrumb|taboola"
)
# Boilerplate that is removed even inside the main content.
_BOILER_RE = re.compile(
    r"cookie|consent|gdpr|newsletter|subscri|signup|sign-up|share|sharing|social|related|"
    r"recommend|comment|disqus|sidebar|breadcrumb|menu|navbar|outbrain|taboola|promo|popup|"
    r"modal|trending|most-?popular|most-?read|read-?more|more-?stories|sr-only|screen-?reader|"
    r"visually-?hidden|print-only|skip-link|author-?bio|tags|byline|(?:^|[\s_-])(?:ad|ads|adv|"
    r"advert\w*|adslot|adunit|dfp|sponsored|sponsor)(?:$|[\s_-])"
)
# Boilerplate that no "content"/"article" in the same class list can excuse.
_STRONG_BOILER_RE = re.compile(
    r"cookie|consent|gdpr|newsletter|subscri|signup|sign-up|share|sharing|social|related|"
    r"recommend|comment|disqus|outbrain|taboola|promo|popup|modal|trending|most-?popular|"
    r"most-?read|more-?stories"
)
_CHROME_ROLES = _tags("navigation menu menubar complementary banner contentinfo search")
_COMMENTS_RE = re.compile(r"comment|disqus|replies|responses")
_BAD_ROLES = _CHROME_ROLES | _tags("alert alertdialog dialog tablist toolbar")
_HIDDEN_STYLE_RE = re.compile(r"display:\s*none|visibility:\s*hidden")
_SENTENCE_END_RE = re.compile(r"[.!?。！？]['\"”’)]?$")
_TITLE_SPLIT_RE = re.compile(r"\s+[|\-–—:·»/]+\s+|\s*[|·»]\s*")
_NORM_RE = re.compile(r"[\W_]+")


# --------------------------------------------------------------------------- tree


class _Node:
    """A light element; children mixes text (str) and elements."""

    __slots__ = (
        "attrs",
        "boiler",
        "children",
        "commas",
        "dropped",
        "hint",
        "hlen",
        "llen",
        "n_embed",
        "n_img",
        "n_input",
        "n_li",
        "n_p",
        "parent",
        "ptext",
        "score",
        "scored",
        "soft",
        "tag",
        "tlen",
        "unit_len",
        "unlikely",
        "weight",
    )

    def __init__(self, tag: str, attrs: dict[str, str], parent: _Node | None) -> None:
        self.tag = tag
        self.attrs = attrs
        self.parent = parent
        self.children: list[_Node | str] = []
        self.dropped = False
        self.hint = ""
        self.unlikely = False
        self.boiler = False
        self.soft = False
        self.weight = 0
        self.score = 0.0
        self.scored = False
        self.tlen = self.llen = self.commas = self.hlen = self.unit_len = self.ptext = 0
        self.n_p = self.n_img = self.n_li = self.n_input = self.n_embed = 0


def _classify(node: _Node) -> None:
    """Compute the class/id hints once, at creation time."""
    attrs = node.attrs
    hint = f"{attrs.get('class', '')} {attrs.get('id', '')}".strip().lower()
    node.hint = hint
    role = attrs.get("role", "").lower()
    if node.tag == "form":
        node.soft = True  # ASP.NET pages wrap everything in one <form>: judged by size later
    if node.tag in _DROP or role in _BAD_ROLES:
        node.dropped = True
    elif "hidden" in attrs or attrs.get("aria-hidden", "").lower() == "true":
        node.dropped = node.tag not in ("html", "body")
    else:
        style = attrs.get("style")
        if style and _HIDDEN_STYLE_RE.search(style.lower()):
            node.dropped = node.tag not in ("html", "body")
    if hint:
        pos = bool(_POSITIVE_RE.search(hint))
        neg = bool(_NEGATIVE_RE.search(hint))
        node.weight = (25 if pos else 0) - (25 if neg else 0)
        if node.tag not in ("body", "html", "a", "main", "article"):
            maybe = _MAYBE_RE.search(hint)
            node.unlikely = bool(_UNLIKELY_RE.search(hint)) and not maybe
            node.boiler = bool(_BOILER_RE.search(hint)) and (
                not maybe or bool(_STRONG_BOILER_RE.search(hint))
            )


class _Builder(HTMLParser):
    """Tolerant tree builder: implied end tags, head/body recovery, bounded depth."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.root = _Node("#root", {}, None)
        self.stack: list[_Node] = [self.root]
        self.skip_data: str | None = None  # inside <script>/<style> raw text
        self.css: list[str] = []  # the page's own style sheets, for rules that hide text
        self.css_len = 0
        self.page: list[_Node] = []  # the <html> and <body> elements, for their styles
        self.in_title = False
        self.title_parts: list[str] = []
        self.og_title: str | None = None

    # -- helpers
    def _pop_to(self, index: int) -> None:
        del self.stack[index:]

    def _close_implied(self, closes: frozenset[str], stops: frozenset[str]) -> None:
        stack = self.stack
        low = max(1, len(stack) - _SCAN)
        for i in range(len(stack) - 1, low - 1, -1):
            tag = stack[i].tag
            if tag in closes:
                self._pop_to(i)
                return
            if tag in stops:
                return

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self._start(tag, attrs, self_closing=False)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self._start(tag, attrs, self_closing=True)

    def _start(self, tag: str, attrs: list[tuple[str, str | None]], self_closing: bool) -> None:
        if self.skip_data:
            return
        if tag in ("script", "style"):
            if not self_closing:
                self.skip_data = tag
            return
        if tag == "meta":
            amap = {k: v or "" for k, v in attrs}
            if amap.get("property", amap.get("name", "")).lower() == "og:title":
                self.og_title = amap.get("content") or self.og_title
            return
        if tag == "title":
            self.in_title = not self_closing
            return
        stack = self.stack
        top = stack[-1]
        if top.tag == "head" and tag not in _HEAD_OK:
            stack.pop()
        if tag in ("html", "body"):
            self.page.append(_Node(tag, {k: (v or "") for k, v in attrs}, None))
        if tag in ("html", "body", "head"):
            if tag == "head" and len(stack) <= 2 and not self_closing:
                pass  # a real head: build it so its leftovers are dropped
            else:
                return
        if tag in _CLOSES_P:
            self._close_implied(_P_SET, _SCOPE)
        implied = _IMPLIED_CLOSE.get(tag)
        if implied is not None:
            self._close_implied(*implied)
        if tag in _HEADINGS and stack[-1].tag in _HEADINGS:
            stack.pop()
        parent = stack[-1]
        node = _Node(tag, {k: (v or "") for k, v in attrs}, parent)
        _classify(node)
        if parent.dropped:
            node.dropped = True
        parent.children.append(node)
        if tag not in _VOID and not self_closing and len(stack) < _MAX_DEPTH:
            stack.append(node)

    def handle_endtag(self, tag: str) -> None:
        if self.skip_data:
            if tag == self.skip_data:
                self.skip_data = None
            return
        if tag == "title":
            self.in_title = False
            return
        if tag == "br":
            self._start("br", [], self_closing=True)
            return
        if tag in ("html", "body"):
            return
        stack = self.stack
        stops = _TABLE_SCOPE if tag in _TABLE_TAGS else _SCOPE
        for i in range(len(stack) - 1, 0, -1):
            cur = stack[i].tag
            if cur == tag:
                self._pop_to(i)
                return
            if cur in stops:
                return

    def handle_data(self, data: str) -> None:
        if self.skip_data:
            if self.skip_data == "style" and self.css_len < _MAX_CSS:
                self.css.append(data)
                self.css_len += len(data)
            return
        if self.in_title:
            self.title_parts.append(data)
            return
        top = self.stack[-1]
        if not top.dropped:
            top.children.append(data)


_P_SET = frozenset(("p",))
# Block content inside a table cell means the table is page layout, not data.
_LAYOUT_HINTS = _tags("table p div ul ol pre blockquote section article h1 h2 h3")
_TABLE_TAGS = _tags("table tbody thead tfoot tr td th caption")


# --------------------------------------------------------------------------- hidden text
#
# A page can hide text from the reader and still hand it to a model that reads the HTML: prompt
# injections ride on it. The browser is the judge of what is visible; short of running one, the
# inline styles and the page's own <style> rules with simple selectors say most of it. External
# style sheets and scripts are out of reach, and rules under conditions (@media with a condition,
# @container) are left alone, since the same text is visible in another layout.

_MAX_CSS = 400_000  # characters of <style> text read per page
_CSS_COMMENT_RE = re.compile(r"/\*.*?\*/", re.S)
_BRACE_RE = re.compile(r"[{}]")
_DECL_RE = re.compile(r"([-a-z]+)\s*:\s*([^;]*)")
_SELECTOR_RE = re.compile(r"([a-z][a-z0-9-]*)?((?:[.#][-\w]+)*)")
_PART_RE = re.compile(r"[.#][-\w]+")
_LENGTH_RE = re.compile(r"(-?(?:\d+\.?\d*|\.\d+))\s*([a-z%]*)")
_UNCONDITIONAL_AT = re.compile(r"@(?:media\s+(?:only\s+)?(?:all|screen)\s*|supports\b[^{]*|layer\b[^{]*)$")
# properties that can hide text; a rule without any of them is not kept
_HIDING_PROPS = frozenset((
    "display", "visibility", "opacity", "font-size", "position", "left", "top", "right", "bottom",
    "text-indent", "margin-left", "margin-top", "clip", "clip-path", "height", "max-height", "width",
    "max-width", "overflow", "overflow-x", "overflow-y", "color", "background", "background-color",
    "transform", "background-clip", "-webkit-background-clip", "-webkit-text-fill-color", "padding",
    "padding-top", "padding-bottom",
))
_PX = {"px": 1.0, "": 1.0, "pt": 4 / 3, "pc": 16.0, "em": 16.0, "rem": 16.0, "ex": 8.0, "ch": 8.0,
       "vw": 12.8, "vh": 8.0, "in": 96.0, "cm": 37.8, "mm": 3.78, "q": 0.945}
_FAR = -900.0  # px: an offset this far left or up puts the box off the screen
_NAMED = {
    "white": (255, 255, 255), "black": (0, 0, 0), "red": (255, 0, 0), "lime": (0, 255, 0),
    "green": (0, 128, 0), "blue": (0, 0, 255), "yellow": (255, 255, 0), "cyan": (0, 255, 255),
    "aqua": (0, 255, 255), "magenta": (255, 0, 255), "fuchsia": (255, 0, 255), "gray": (128, 128, 128),
    "grey": (128, 128, 128), "silver": (192, 192, 192), "maroon": (128, 0, 0), "navy": (0, 0, 128),
    "olive": (128, 128, 0), "purple": (128, 0, 128), "teal": (0, 128, 128), "orange": (255, 165, 0),
    "whitesmoke": (245, 245, 245), "snow": (255, 250, 250), "ivory": (255, 255, 240),
}
Rgba = tuple[float, float, float, float]
_TRANSPARENT: Rgba = (0.0, 0.0, 0.0, 0.0)
_UNKNOWN = "?"  # a background that is an image or a gradient: any text colour may show on it


def _declarations(style: str) -> dict[str, tuple[str, bool]]:
    """`property: value` pairs of a declaration block, lower case: {property: (value, important)}."""
    out: dict[str, tuple[str, bool]] = {}
    for prop, value in _DECL_RE.findall(style.lower()):
        if prop in _HIDING_PROPS:
            important = "!important" in value
            out[prop] = (value.replace("!important", "").strip(), important)
    return out


def _px(value: str) -> float | None:
    """A CSS length in px (ems at 16px, a 1280x800 viewport); None for anything else."""
    m = _LENGTH_RE.fullmatch(value.strip())
    if m is None or m.group(2) not in _PX:
        return None
    number = float(m.group(1))
    return number * _PX[m.group(2)] if number else 0.0


def _colour(value: str) -> Rgba | str | None:
    """A colour as (r, g, b, alpha), `_UNKNOWN` for images and gradients, None if not a colour."""
    value = value.strip()
    if "url(" in value or "gradient(" in value or "image-set(" in value:
        return _UNKNOWN
    if value == "transparent":
        return _TRANSPARENT
    if value.startswith("#"):
        digits = value[1:].split()[0] if value[1:] else ""
        if len(digits) in (3, 4):
            digits = "".join(d * 2 for d in digits)
        if len(digits) in (6, 8):
            try:
                r, g, b = (int(digits[i:i + 2], 16) for i in (0, 2, 4))
                a = int(digits[6:8], 16) / 255 if len(digits) == 8 else 1.0
            except ValueError:
                return None
            return (r, g, b, a)
        return None
    m = re.match(r"(rgba?|hsla?)\(([^)]*)\)", value)
    if m:
        parts = [p for p in re.split(r"[\s,/]+", m.group(2).strip()) if p]
        try:
            nums = [float(p.rstrip("%deg")) / (100 if p.endswith("%") else 1) for p in parts]
        except ValueError:
            return None
        if len(nums) < 3:
            return None
        alpha = nums[3] if len(nums) > 3 else 1.0
        if m.group(1).startswith("rgb"):
            scale = [255.0 if parts[i].endswith("%") else 1.0 for i in range(3)]
            return (nums[0] * scale[0], nums[1] * scale[1], nums[2] * scale[2], alpha)
        red, green, blue = colorsys.hls_to_rgb((nums[0] % 360) / 360, nums[2], nums[1])
        return (red * 255, green * 255, blue * 255, alpha)
    first = value.split()[0] if value else ""
    named = _NAMED.get(first)
    return (*named, 1.0) if named else None


def _background(decls: dict[str, str]) -> Rgba | str | None:
    """The box's own background: a colour, `_UNKNOWN` (an image), or None (none declared)."""
    if "background-color" in decls:
        found = _colour(decls["background-color"])
        if "background" not in decls or found not in (None, _TRANSPARENT):
            return found
    value = decls.get("background")
    if value is None:
        return None
    if "url(" in value or "gradient(" in value:
        return _UNKNOWN
    for word in re.findall(r"#[0-9a-f]+|(?:rgba?|hsla?)\([^)]*\)|[a-z]+", value):
        found = _colour(word)
        if found is not None:
            return found
    return None


def _same_colour(fg: Rgba, bg: Rgba) -> bool:
    """Text a reader cannot tell from its background (within a few levels per channel)."""
    return max(abs(fg[i] - bg[i]) for i in range(3)) <= 10


def _box_hidden(decls: dict[str, str]) -> str | None:
    """How the declarations hide the whole box and everything in it: "gone" (not shown, or shown
    off the screen), "clipped" (drawn in a box of nothing, as screen-reader text is), else None."""
    get = decls.get
    if get("display") == "none" or get("visibility") in ("hidden", "collapse"):
        return "gone"
    opacity = get("opacity")
    if opacity is not None:
        m = _LENGTH_RE.fullmatch(opacity)
        if m and float(m.group(1)) / (100 if m.group(2) == "%" else 1) <= 0.01:
            return "gone"
    transform = get("transform", "")
    if re.search(r"scale[xy]?\(\s*0*\.?0+\s*[,)]", transform):
        return "gone"
    moved = ("left", "top", "right") if get("position") in ("absolute", "fixed", "relative") else ()
    for side in (*moved, "margin-left", "margin-top", "text-indent"):
        offset = _px(get(side, ""))
        if offset is not None and (offset <= _FAR or (side == "right" and abs(offset) >= 5000)):
            return "gone"
    clip = get("clip", "")
    if clip.startswith("rect("):
        sizes = [_px(v) for v in re.split(r"[\s,]+", clip[5:].rstrip(")").strip()) if v]
        if sizes and all(s is not None and s <= 1 for s in sizes):
            return "clipped"
    clip_path = get("clip-path", "")
    m = re.match(r"inset\(\s*(\d+\.?\d*)%", clip_path)
    if (m and float(m.group(1)) >= 50) or re.match(r"(?:circle|ellipse)\(\s*0+(?:px|%)?[\s)]", clip_path):
        return "clipped"
    overflow = {get("overflow", "").split(" ")[0], get("overflow-x"), get("overflow-y")}
    padded = any(re.search(r"[1-9]", get(prop, "")) for prop in ("padding", "padding-top", "padding-bottom"))
    if overflow & {"hidden", "clip"} and not padded:  # `height:0; padding-bottom:56%`: a ratio box
        for prop in ("height", "max-height", "width", "max-width"):
            size = _px(get(prop, ""))
            if size is not None and size <= 1:
                return "clipped"
    return None


class StyleSheet:
    """The simple rules of a page's <style> blocks that set properties able to hide text.

    Selectors kept: a tag, classes and an id without combinators, pseudo-classes or attributes
    (`.hidden`, `#note`, `span.x`, `p.a.b`), applied with their specificity and order. A selector that
    also appears under a conditional at-rule (`@media (max-width: 600px)`, `@media print`) is left
    out altogether: its visibility depends on the layout.
    """

    __slots__ = ("by_key", "order")

    def __init__(self) -> None:
        # key ("tag", ".class", "#id") -> rules (specificity, order, tag, classes, id, declarations)
        self.by_key: dict[str, list[tuple[tuple[int, int, int], int, str | None, frozenset[str],
                                          str | None, dict[str, tuple[str, bool]]]]] = {}
        self.order = 0

    @classmethod
    def parse(cls, css: str) -> StyleSheet:
        sheet = cls()
        if not css or "{" not in css:
            return sheet
        rules: list[tuple[str, str]] = []
        conditional: set[str] = set()
        css = _CSS_COMMENT_RE.sub("", css.lower()).replace("<!--", "").replace("-->", "")
        _css_blocks(css, rules, conditional, 0)
        for prelude, body in rules:
            simple = [m for m in (_SELECTOR_RE.fullmatch(sel.strip()) for sel in prelude.split(","))
                      if m is not None and m.group() and m.group() not in conditional]
            decls = _declarations(body) if simple else None
            if not decls:
                continue
            for m in simple:
                tag = m.group(1)
                parts = _PART_RE.findall(m.group(2) or "")
                ids = [p[1:] for p in parts if p[0] == "#"]
                classes = frozenset(p[1:] for p in parts if p[0] == ".")
                if len(ids) > 1:
                    continue
                spec = (len(ids), len(classes), 1 if tag else 0)
                key = f"#{ids[0]}" if ids else f".{min(classes)}" if classes else str(tag)
                sheet.order += 1
                sheet.by_key.setdefault(key, []).append(
                    (spec, sheet.order, tag, classes, ids[0] if ids else None, decls))
        return sheet

    def declarations(self, node: _Node) -> dict[str, str]:
        """The node's hiding-related declarations after the cascade (the inline style wins unless
        a rule is !important)."""
        found: list[tuple[tuple[int, int, int, int], int, dict[str, tuple[str, bool]]]] = []
        by_key = self.by_key
        if by_key:
            attrs = node.attrs
            keys = [node.tag] if node.tag in by_key else []
            classes = frozenset(attrs["class"].lower().split()) if "class" in attrs else frozenset()
            keys.extend(key for c in classes if (key := f".{c}") in by_key)
            node_id = attrs["id"].lower() if attrs.get("id") else None
            if node_id and f"#{node_id}" in by_key:
                keys.append(f"#{node_id}")
            for key in keys:
                for spec, order, tag, need, rule_id, decls in by_key[key]:
                    if (tag is None or tag == node.tag) and need <= classes and rule_id in (None, node_id):
                        found.append(((0, *spec), order, decls))
        style = node.attrs.get("style")
        if style:
            found.append(((1, 0, 0, 0), 0, _declarations(style)))
        if not found:
            return {}
        winners: dict[str, tuple[tuple[bool, tuple[int, int, int, int], int], str]] = {}
        for specificity, order, decls in found:
            for prop, (value, important) in decls.items():
                rank = (important, specificity, order)
                if prop not in winners or rank >= winners[prop][0]:
                    winners[prop] = (rank, value)
        return {prop: value for prop, (_, value) in winners.items()}


def _css_blocks(css: str, rules: list[tuple[str, str]], conditional: set[str], depth: int) -> None:
    """Split style sheet text into (selectors, declarations) pairs; at-rules that always apply
    (`@media screen`, `@supports`, `@layer`) are read through, conditional ones only mark their
    selectors."""
    at = 0
    n = len(css)
    while at < n:
        brace = css.find("{", at)
        if brace < 0:
            return
        prelude = css[at:brace].strip()
        semi = prelude.rfind(";")  # `@import ...;` and other statements before the rule
        if semi >= 0:
            prelude = prelude[semi + 1:].strip()
        if prelude.startswith("@"):
            level, end = 1, n + 1
            for m in _BRACE_RE.finditer(css, brace + 1):
                level += 1 if m.group() == "{" else -1
                if not level:
                    end = m.end()
                    break
            inner = css[brace + 1:end - 1]
            if depth < 4 and _UNCONDITIONAL_AT.match(prelude):
                _css_blocks(inner, rules, conditional, depth + 1)
            elif depth < 4 and prelude.startswith(("@media", "@container")):
                found: list[tuple[str, str]] = []
                _css_blocks(inner, found, conditional, depth + 1)
                conditional.update(s.strip() for p, _ in found for s in p.split(","))
            at = end
            continue
        close = css.find("}", brace)
        if close < 0:
            close = n
        rules.append((prelude, css[brace + 1:close]))
        at = close + 1


def _has_math(node: _Node) -> bool:
    """Whether a box holds MathML: the text copy of formulas drawn elsewhere (MathJax's assistive
    MathML sits in a clipped box, and the drawn formula has no text)."""
    stack: list[_Node | str] = [node]
    while stack:
        item = stack.pop()
        if isinstance(item, _Node):
            if item.tag == "math":
                return True
            stack.extend(item.children)
    return False


_SIZE_WORDS = frozenset(("xx-small", "x-small", "small", "medium", "large", "x-large", "xx-large",
                         "xxx-large", "initial", "revert", "unset"))
_RELATIVE_MIN = {"em": 0.1, "%": 10.0, "ex": 0.2, "ch": 0.2}


def _tiny(value: str, inherited: bool) -> bool:
    """Whether a `font-size` leaves text too small to see (relative sizes of nothing stay nothing)."""
    m = _LENGTH_RE.fullmatch(value)
    if m is None:
        return False if value in _SIZE_WORDS else inherited
    number, unit = float(m.group(1)), m.group(2)
    if unit in _RELATIVE_MIN:
        return inherited or number <= _RELATIVE_MIN[unit]
    return number * _PX[unit] <= 1 if unit in _PX else inherited


def _presentational(node: _Node) -> dict[str, str]:
    """The colours old HTML attributes set (`<font color>`, `bgcolor`), as the declarations they
    stand for; any CSS rule or inline style overrides them."""
    attrs = node.attrs
    found = {}
    if node.tag == "font" and attrs.get("color"):
        found["color"] = attrs["color"].strip().lower()
    if attrs.get("bgcolor"):
        found["background-color"] = attrs["bgcolor"].strip().lower()
    return found


def _styles(node: _Node, sheet: StyleSheet) -> dict[str, str]:
    """The node's hiding-related declarations: presentational attributes, then the cascade."""
    decls = sheet.declarations(node) if (sheet.by_key or "style" in node.attrs) else {}
    if "color" in node.attrs or "bgcolor" in node.attrs:
        return {**_presentational(node), **decls}
    return decls


def hide_styled(root: _Node, sheet: StyleSheet, page: Sequence[_Node] = ()) -> None:
    """Mark what the page's styles hide: boxes that are not shown at all are dropped with their
    content; text set in a zero font size, or in its background's colour, loses its own words
    (a child that sets a visible size or colour of its own stays). `page` holds the <html> and
    <body> elements (folded into the root), whose colours the page starts from. Colours come from
    CSS and from the `<font color>` and `bgcolor` attributes. With no background declared, text
    of any colour counts as visible: a style sheet out of reach may draw the page dark."""
    fg: Rgba | str | None = None
    bg: Rgba | str | None = None
    for node in page:
        decls = _styles(node, sheet)
        own = _background(decls)
        bg = own if own is not None and own != _TRANSPARENT else bg
        fg = (_colour(decls["color"]) or fg) if "color" in decls else fg
    stack: list[tuple[_Node, Rgba | str | None, Rgba | str | None, bool]] = [(root, fg, bg, False)]
    while stack:
        node, fg, bg, tiny = stack.pop()
        for child in node.children:
            if isinstance(child, str) or child.dropped:
                continue
            c_fg, c_bg, c_tiny = fg, bg, tiny
            decls = _styles(child, sheet)
            if decls:
                how = _box_hidden(decls) if child.tag not in ("html", "body") else None
                if how == "gone" or (how == "clipped" and not _has_math(child)):
                    child.dropped = True
                    continue
                if "font-size" in decls:
                    c_tiny = _tiny(decls["font-size"], tiny)
                own_bg = _background(decls)
                if own_bg is not None and own_bg != _TRANSPARENT:
                    c_bg = own_bg
                if "color" in decls or "-webkit-text-fill-color" in decls:
                    clip_text = "text" in (decls.get("background-clip", ""),
                                           decls.get("-webkit-background-clip", ""))
                    value = decls.get("-webkit-text-fill-color") or decls.get("color", "")
                    c_fg = _UNKNOWN if clip_text else (_colour(value) or fg)  # `inherit`: as before
            invisible = c_tiny or (isinstance(c_fg, tuple) and (
                c_fg[3] <= 0.05 or (isinstance(c_bg, tuple) and c_bg[3] > 0.95 and _same_colour(c_fg, c_bg))))
            if invisible and child.tag not in ("html", "body"):
                child.children = [" " if isinstance(c, str) else c for c in child.children]
            stack.append((child, c_fg, c_bg, c_tiny))


# --------------------------------------------------------------------------- scoring


def _text_len(text: str) -> tuple[int, int]:
    """Collapsed length (CJK weighted) and comma count of a raw text piece."""
    stripped = text.strip()
    if not stripped:
        return 0, 0
    n = len(_WS_RE.sub(" ", stripped))
    if (n and stripped[0] >= "\u3040") or (n > 8 and not stripped.isascii()):
        n += _CJK_WEIGHT * len(_CJK_RE.findall(stripped))
    return n, len(_COMMA_RE.findall(stripped))


class _Scorer:
    """One pass computing subtree statistics and the Readability-style container scores."""

    def __init__(self, strip_unlikely: bool, weigh_classes: bool) -> None:
        self.strip_unlikely = strip_unlikely
        self.weigh_classes = weigh_classes
        self.candidates: list[_Node] = []
        self.stripped = False  # whether an unlikely sub-tree was left out

    def skip(self, node: _Node) -> bool:
        if self.strip_unlikely and node.unlikely and not node.dropped:
            self.stripped = True
            return True
        return node.dropped

    def run(self, root: _Node) -> None:
        self._walk(root, root, False)

    def _walk(self, node: _Node, owner: _Node, in_link: bool) -> None:
        """Post-order: fills tlen/llen/commas/counts and flushes text runs as score units."""
        tlen = llen = commas = hlen = 0
        n_p = n_img = n_li = n_input = n_embed = 0
        run = [0, 0, 0]  # length, commas, link length of the current inline run of `owner`
        is_block = node.tag in _BLOCK
        node.ptext = 0
        if is_block:
            owner = node
        for child in node.children:
            if isinstance(child, str):
                n, c = _text_len(child)
                if n:
                    tlen += n
                    commas += c
                    if in_link:
                        llen += n
            else:
                tag = child.tag
                if tag == "img":
                    n_img += 1
                    continue
                if tag in ("iframe", "embed", "object", "video"):
                    n_embed += 1
                    continue
                if tag == "input":
                    n_input += 1
                    continue
                if self.skip(child):
                    continue
                child_block = tag in _BLOCK
                if child_block and is_block:
                    self._flush(node, run)
                self._walk(child, owner, in_link or tag == "a")
                tlen += child.tlen
                llen += child.llen
                commas += child.commas
                hlen += child.hlen
                node.ptext += child.ptext
                n_p += child.n_p + (tag == "p")
                n_img += child.n_img
                n_li += child.n_li + (tag == "li")
                n_input += child.n_input
                n_embed += child.n_embed
                if not child_block:
                    # inline content joins the run of the enclosing block
                    run[0] += child.unit_len
                    run[1] += child.commas
                    run[2] += child.llen
                continue
            if n:
                run[0] += n
                run[1] += c
                if in_link:
                    run[2] += n
        node.tlen, node.llen, node.commas, node.hlen = tlen, llen, commas, hlen
        node.n_p, node.n_img, node.n_li = n_p, n_img, n_li
        node.n_input, node.n_embed = n_input, n_embed
        if node.tag in _HEADINGS:
            node.hlen = tlen
        if is_block:
            self._flush(node, run)
            node.unit_len = 0
        else:
            node.unit_len = run[0]

    def _flush(self, owner: _Node, run: list[int]) -> None:
        length, commas, links = run
        run[0] = run[1] = run[2] = 0
        if length < _MIN_UNIT or owner.tag in _HEADINGS:
            return
        density = links / length
        if density > 0.5:
            return
        owner.ptext += length
        score = (1 + commas + min(length // 100, 3)) * (1 - density)
        node: _Node | None = owner.parent if owner.tag in _PARA else owner
        level = 0
        while node is not None and level < 5:
            if node.tag == "#root":
                break
            if not node.scored:
                self._init_node(node)
            divider = 1 if level == 0 else 2 if level == 1 else level * 3
            node.score += score / divider
            node = node.parent
            level += 1

    def _init_node(self, node: _Node) -> None:
        node.scored = True
        self.candidates.append(node)
        tag = node.tag
        base = 0
        if tag in ("div", "article", "main", "section"):
            base = 5
        elif tag in ("pre", "td", "blockquote"):
            base = 3
        elif tag in ("address", "ol", "ul", "dl", "dd", "dt", "li", "form"):
            base = -3
        elif tag in _HEADINGS or tag == "th":
            base = -5
        if tag in ("article", "main"):
            base += 10
        node.score = base + (node.weight if self.weigh_classes else 0)


def _link_density(node: _Node) -> float:
    return node.llen / node.tlen if node.tlen else 0.0


def _final(node: _Node) -> float:
    return node.score * (1 - _link_density(node))


def _pick_top(candidates: list[_Node], body: _Node) -> _Node:
    """Best-scoring container, promoted to a shared ancestor when the runner-ups agree."""
    if not candidates:
        return body
    ranked = sorted(candidates, key=_final, reverse=True)
    top = ranked[0]
    top_score = _final(top)
    if top_score <= 0:
        return body
    # Several close runner-ups under one ancestor: the article is split in parts.
    alternatives = [c for c in ranked[1:6] if _final(c) >= 0.75 * top_score]
    if len(alternatives) >= 3:
        chains = []
        for alt in alternatives:
            chain = set()
            cur = alt.parent
            while cur is not None:
                chain.add(id(cur))
                cur = cur.parent
            chains.append(chain)
        parent = top.parent
        while parent is not None and parent is not body and parent.tag != "#root":
            if sum(id(parent) in ch for ch in chains) >= 3:
                top = parent
                break
            parent = parent.parent
        if not top.scored:
            top.scored = True
    # Walk up while the parent keeps a comparable score.
    last = _final(top)
    threshold = last / 3
    parent = top.parent
    while parent is not None and parent is not body and parent.tag != "#root":
        if not parent.scored:
            parent = parent.parent
            continue
        pscore = _final(parent)
        if pscore < threshold:
            break
        if pscore > last:
            top = parent
            break
        last = pscore
        parent = parent.parent
    # A lone child is just a wrapper level: use the parent.
    parent = top.parent
    while parent is not None and parent is not body and parent.tag != "#root":
        if sum(1 for c in parent.children if isinstance(c, _Node) and c.tlen) != 1:
            break
        top = parent
        parent = top.parent
    return top


def _select(top: _Node, body: _Node) -> list[_Node]:
    """The winning container plus its siblings that look like article content."""
    parent = top.parent
    if parent is None or top is body:
        return [top]
    top_score = _final(top)
    threshold = max(10.0, top_score * 0.2)
    top_class = top.attrs.get("class", "")
    chosen = []
    for sib in parent.children:
        if not isinstance(sib, _Node) or sib.dropped or not sib.tlen:
            continue
        if sib is top:
            chosen.append(sib)
        elif not (sib.unlikely or sib.boiler):
            same_class = bool(top_class) and sib.attrs.get("class", "") == top_class
            bonus = top_score * 0.2 if same_class else 0.0
            if (sib.scored and _final(sib) + bonus >= threshold) or _sibling_fits(sib, top):
                chosen.append(sib)
    return chosen


def _sibling_fits(sib: _Node, top: _Node) -> bool:
    """Unscored siblings: article parts split across containers, or plain prose paragraphs."""
    density = _link_density(sib)
    if sib.weight >= 0 and sib.ptext >= max(200, 0.2 * top.ptext) and density < 0.25:
        return True
    if sib.tag not in ("p", "blockquote", "pre", "ul", "ol") and (sib.tag != "div" or sib.n_p):
        return False
    if sib.tlen > 80:
        return density < 0.25
    return density == 0 and sib.tag == "p"


# --------------------------------------------------------------------------- cleaning


def _is_data_table(node: _Node) -> bool:
    """Tables with cells of short text are data; tables holding paragraphs are layout."""
    if node.attrs.get("role", "").lower() == "presentation":
        return False
    stack = list(node.children)
    while stack:
        child = stack.pop()
        if isinstance(child, str):
            continue
        if child.tag in _LAYOUT_HINTS and child.tlen > 0 and not child.dropped:
            return False
        stack.extend(child.children)
    return True


def _clean_conditionally(node: _Node, in_list: bool) -> bool:
    """Readability's conditional cleaning: is this container more chrome than content?"""
    weight = node.weight
    if weight < 0 and weight + (node.score if node.scored else 0) < 0:
        return True
    if node.commas >= 10:
        return False
    tag = node.tag
    is_list = tag in ("ul", "ol") or in_list
    p = node.n_p
    img = node.n_img
    li = node.n_li - 100
    content_len = node.tlen
    density = _link_density(node)
    heading_density = node.hlen / content_len if content_len else 0.0
    if img > 1 and p / img < 0.5:
        return True
    if not is_list and li > p:
        return True
    if node.n_input > p // 3:
        return True
    if not is_list and heading_density < 0.9 and content_len < 25 and (img == 0 or img > 2):
        return True
    if not is_list and weight < 25 and density > 0.2:
        return True
    if weight >= 25 and density > 0.5:
        return True
    return (node.n_embed == 1 and content_len < 75) or node.n_embed > 1


# --------------------------------------------------------------------------- emission


class _Emitter:
    """Turns the chosen sub-trees into blocks, cleaning boilerplate on the way."""

    def __init__(self, scorer: _Scorer, clean: bool, include_tables: bool, doc_len: int) -> None:
        self.scorer = scorer
        self.clean = clean
        self.include_tables = include_tables
        self.doc_len = doc_len
        self.blocks: list[tuple[Block, float]] = []
        self.parts: list[str] = []
        self.link_chars = 0
        self.quote = 0
        self.pre = 0
        self.keep: set[int] = set()  # the chosen containers themselves are never cleaned

    # -- buffer
    def add(self, text: str, in_link: bool) -> None:
        self.parts.append(text)
        if in_link:
            self.link_chars += len(text.strip())

    def flush(self, kind: str, level: int = 0) -> None:
        if not self.parts:
            return
        raw = "".join(self.parts)
        links = self.link_chars
        self.parts = []
        self.link_chars = 0
        if kind == "pre":
            text = raw.strip("\n\r").rstrip()
            if not text.strip():
                return
        else:
            lines = (_WS_RE.sub(" ", line).strip() for line in raw.split("\n"))
            text = "\n".join(line for line in lines if line)
            if not text:
                return
        if kind == "paragraph" and self.quote:
            kind = "quote"
        density = links / len(text) if text else 0.0
        self.blocks.append((Block(kind, text, level), density))

    # -- walking
    def skip(self, node: _Node, in_list: bool) -> bool:
        if self.scorer.skip(node):
            return True
        if id(node) in self.keep:
            return False
        if (node.boiler or node.soft) and node.tlen < 0.5 * self.doc_len:
            return True
        if not self.clean:
            return False
        tag = node.tag
        if tag == "figcaption":
            return True
        if tag in _HEADINGS and node.weight < 0 and _HEADINGS[tag] <= 3:
            return True
        if tag in ("div", "section", "ul", "ol", "table", "fieldset", "dl", "figure"):
            if tag == "table" and _is_data_table(node):
                return False
            return _clean_conditionally(node, in_list)
        return False

    def walk(self, node: _Node, kind: str, in_link: bool = False, in_list: bool = False) -> None:
        for child in node.children:
            if isinstance(child, str):
                if self.pre:
                    self.add(child, in_link)
                else:
                    self.add(child.replace("\n", " "), in_link)
                continue
            tag = child.tag
            if tag == "br":
                self.parts.append("\n")
                continue
            if tag == "hr":
                self.flush(kind)
                continue
            if tag in _VOID or self.skip(child, in_list):
                continue
            if tag not in _BLOCK:
                self.walk(child, kind, in_link or tag == "a", in_list)
                continue
            self.flush(kind)
            if tag in _HEADINGS:
                self.walk(child, "heading", in_link, in_list)
                self.flush("heading", _HEADINGS[tag])
            elif tag == "pre":
                self.pre += 1
                self.walk(child, "pre", in_link, in_list)
                self.flush("pre")
                self.pre -= 1
            elif tag == "li":
                self.walk(child, "list_item", in_link, True)
                self.flush("list_item")
            elif tag in ("ul", "ol"):
                self.walk(child, "paragraph", in_link, True)
                self.flush("paragraph")
            elif tag == "blockquote":
                self.quote += 1
                self.walk(child, "quote", in_link, in_list)
                self.flush("quote")
                self.quote -= 1
            elif tag == "table" and _is_data_table(child):
                if self.include_tables:
                    self.table(child)
            else:
                self.walk(child, "paragraph", in_link, in_list)
                self.flush("paragraph")

    def table(self, table: _Node) -> None:
        rows: list[_Node] = []
        stack: list[_Node | str] = list(reversed(table.children))
        while stack:
            item = stack.pop()
            if isinstance(item, str) or item.dropped:
                continue
            if item.tag == "tr":
                rows.append(item)
            elif item.tag in ("thead", "tbody", "tfoot"):
                stack.extend(reversed(item.children))
        for row in rows:
            cells = []
            for cell in row.children:
                if isinstance(cell, _Node) and cell.tag in ("td", "th") and not cell.dropped:
                    text = _WS_RE.sub(" ", _flat_text(cell, self.scorer)).strip()
                    if text:
                        cells.append(text)
            if cells:
                self.blocks.append((Block("table_row", " | ".join(cells)), 0.0))


def _flat_text(node: _Node, scorer: _Scorer) -> str:
    out: list[str] = []
    stack: list[_Node | str] = [node]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            out.append(item)
        elif item.tag in ("br", "p", "div", "li"):
            out.append(" ")
            stack.extend(reversed(item.children))
        elif not scorer.skip(item):
            stack.extend(reversed(item.children))
    return "".join(out)


# --------------------------------------------------------------------------- title


def _norm(text: str) -> str:
    return _NORM_RE.sub("", text.lower())


def _find_h1(node: _Node) -> str | None:
    stack: list[_Node | str] = [node]
    while stack:
        item = stack.pop()
        if isinstance(item, str) or item.dropped:
            continue
        if item.tag == "h1":
            text = _WS_RE.sub(" ", "".join(_iter_text(item))).strip()
            if text:
                return text
        stack.extend(reversed(item.children))
    return None


def _iter_text(node: _Node) -> list[str]:
    out: list[str] = []
    stack: list[_Node | str] = [node]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            out.append(item)
        elif not item.dropped:
            stack.extend(reversed(item.children))
    return out


def _is_title_dup(text: str, titles: list[str]) -> bool:
    key = _norm(text)
    if not key:
        return False
    for title in titles:
        if key == title or (len(key) >= 15 and key in title and len(key) >= 0.4 * len(title)):
            return True
    return False


# --------------------------------------------------------------------------- entry point


def _run(
    root: _Node,
    body: _Node,
    *,
    strip_unlikely: bool,
    weigh_classes: bool,
    clean: bool,
    include_tables: bool,
    comments: bool,
) -> tuple[list[tuple[Block, float]], int, bool]:
    """One extraction attempt: blocks, the text length it could see, whether it stripped."""
    scorer = _Scorer(strip_unlikely, weigh_classes)
    scorer.run(root)
    top = _pick_top(scorer.candidates, body)
    selected = _select(top, body)
    emitter = _Emitter(scorer, clean, include_tables, sum(n.tlen for n in selected))
    emitter.keep = {id(n) for n in selected}
    extra: list[_Node | str] = []
    if comments:
        for node in _comment_roots(root):
            emitter.keep.add(id(node))  # kept in place when inside the chosen containers
            if not _inside(node, selected):
                extra.append(node)
    wrapper = _Node("#wrap", {}, None)
    groups: tuple[list[_Node | str], ...] = (list(selected), extra)
    for children in groups:
        wrapper.children = children
        emitter.walk(wrapper, "paragraph")
        emitter.flush("paragraph")
    return emitter.blocks, root.tlen, scorer.stripped


def _comment_roots(root: _Node) -> list[_Node]:
    """Outermost comment sections of the page, in page order."""
    found: list[_Node] = []
    stack: list[_Node | str] = [root]
    while stack:
        item = stack.pop()
        if isinstance(item, str) or item.dropped:
            continue
        if item.tlen and _COMMENTS_RE.search(item.hint):
            found.append(item)
            continue
        stack.extend(reversed(item.children))
    return found


def _inside(node: _Node, containers: list[_Node]) -> bool:
    ids = {id(c) for c in containers}
    cur: _Node | None = node
    while cur is not None:
        if id(cur) in ids:
            return True
        cur = cur.parent
    return False


def _block_len(blocks: list[tuple[Block, float]]) -> int:
    return sum(_text_len(b.text)[0] for b, _ in blocks)


def extract_main_text(
    html: str,
    *,
    include_tables: bool = True,
    include_comments: bool = False,
    min_block_chars: int = 0,
) -> Extracted:
    """Extract the title and main-content blocks of an HTML page; never raises."""
    try:
        return _extract(html, include_tables, include_comments, min_block_chars)
    except Exception:  # a malformed page must not take the caller down
        return EMPTY


def _extract(html: str, tables: bool, comments: bool, min_chars: int) -> Extracted:
    if not isinstance(html, str) or not html.strip():
        return EMPTY
    builder = _Builder()
    try:
        builder.feed(html)
        builder.close()
    except Exception:  # keep whatever was parsed before the parser gave up
        pass
    root = builder.root
    body = root  # <html>/<body> tags are folded into the root while building
    hide_styled(root, StyleSheet.parse("".join(builder.css)), builder.page)

    title = _WS_RE.sub(" ", "".join(builder.title_parts)).strip() or None
    if title is None and builder.og_title:
        title = _WS_RE.sub(" ", builder.og_title).strip() or None
    if title is None:
        title = _find_h1(root)

    if comments:
        _unmark_comments(root)

    attempts = (
        {"strip_unlikely": True, "weigh_classes": True, "clean": True},
        {"strip_unlikely": False, "weigh_classes": True, "clean": True},
        {"strip_unlikely": False, "weigh_classes": False, "clean": True},
        {"strip_unlikely": False, "weigh_classes": False, "clean": False},
    )
    best: list[tuple[Block, float]] = []
    best_len = -1
    stripped = True
    for i, flags in enumerate(attempts):
        if i == 1 and not stripped:
            continue  # nothing was stripped as unlikely: the same run again
        blocks, total, stripped_now = _run(root, body, include_tables=tables, comments=comments, **flags)
        stripped = stripped and stripped_now
        length = _block_len(blocks)
        # a later, looser attempt must find clearly more text to replace a stricter one
        if length > 2 * best_len if best_len > 0 else length > best_len:
            best, best_len = blocks, length
        if length >= 500 or (length >= 0.8 * total and not stripped):
            break  # long enough, or nothing left that a looser attempt could add

    titles = []
    for t in (title, builder.og_title):
        if t:
            titles.append(_norm(t))
            titles.extend(_norm(p) for p in _TITLE_SPLIT_RE.split(t) if len(p) > 3)
    out: list[Block] = []
    for i, (block, density) in enumerate(best):
        if block.kind == "heading" and i < 3 and _is_title_dup(block.text, titles):
            continue
        if block.kind != "heading" and block.kind != "pre" and len(block.text) < min_chars:
            continue
        if (
            density > 0.6
            and block.kind in ("paragraph", "list_item")
            and (density > 0.8 or len(block.text) < 120)
        ):
            continue
        out.append(block)
    text = "\n\n".join(_render(b) for b in out)
    return Extracted(title, tuple(out), text)


def _unmark_comments(root: _Node) -> None:
    """With comments wanted, comment sections stop counting as boilerplate."""
    stack: list[_Node | str] = [root]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            continue
        if item.hint and _COMMENTS_RE.search(item.hint):
            item.boiler = False
            item.unlikely = False
            item.weight = max(item.weight, 0)
        stack.extend(item.children)


def _render(block: Block) -> str:
    if block.kind == "list_item":
        return f"- {block.text}"
    return block.text
