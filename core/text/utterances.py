"""Spoken-transcript signals: content words, filler and backchannel lines, question relevance with its
neighbourhood.

Meeting talk is full of lines that carry nothing ("Yes.", "Perfectly happy.", "嗯对对对"), and a
question about a meeting is usually answered by a stretch of it, not by the one line that repeats the
question's words. These functions give the organizer what it needs to prefer content to filler and
to follow the question: the content terms of a line (stemmed English words and Chinese character
bigrams, filler words and function characters left out), the question's terms without its frame
("summarize the discussion about ..."), and each line's BM25 relevance beside a smoothed relevance that
spreads over the lines around a match.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence

from compactor.text.relevance import Bm25, index_terms
from compactor.text.terms import is_han, stopwords

#: Stems of the words that frame a question about a meeting rather than name its subject.
QUESTION_FRAME = frozenset({
    "summar", "summari", "summaris", "discuss", "talk", "say", "said", "think", "thought", "opinion",
    "view", "what", "whi", "how", "group", "team", "meet", "decis", "decid", "mention", "propos", "idea"})
#: Chinese words that frame a question or an agenda headline.
QUESTION_FRAME_ZH = frozenset({"关于", "讨论", "想法", "看法", "介绍", "分享", "观点", "问题", "情况", "内容",
                               "方面", "相关", "总结", "怎么", "什么", "如何"})
#: Stems of words that carry no content in speech: backchannels, hedges, fillers, light verbs.
FILLER = frozenset({
    "yeah", "yes", "yep", "yup", "okay", "ok", "right", "mm", "mmm", "hmm", "uh", "um", "uhm", "er",
    "erm", "sure", "well", "alright", "good", "great", "fine", "perfect", "happi", "true", "exact",
    "absolut", "thank", "realli", "oh", "cool", "nice", "agre", "inde", "gonna", "wanna", "like",
    "just", "know", "mean", "actual", "basic", "probabl", "thing", "kind", "sort", "lot", "bit",
    "stuff", "someth", "anyth", "everyth", "guess", "suppos", "get", "got", "go", "goe", "one", "also",
    "even", "still", "mayb", "may", "might", "would", "could", "should", "said", "say", "think",
    "thought", "let", "hey", "huh", "wow"})
#: Han characters that make up Chinese backchannels and function words.
FILLER_HAN = frozenset("嗯啊哦呃噢唉哎呀吧呢吗嘛啦哈对好是的了就那这个"
                       "然后我你他她它们在有也都很还么没不去来说")

#: A line with fewer content terms than this is filler.
MIN_CONTENT = 2
#: Width (in lines) over which a match's relevance spreads to its neighbours.
SPREAD = 4.0


def content_terms(text: str) -> frozenset[str]:
    """The distinct content terms of a line: stemmed English words and Chinese bigrams, without
    filler words and without bigrams made only of function characters."""
    zh_stop = stopwords("zh")
    out = set()
    for term in index_terms(text):
        if is_han(term[0]):
            if len(term) == 1 or term in zh_stop or all(ch in FILLER_HAN or ch in zh_stop for ch in term):
                continue
        elif term in FILLER:
            continue
        out.add(term)
    return frozenset(out)


def is_filler(text: str) -> bool:
    """Whether a line carries (almost) no content: a backchannel, a hedge, an acknowledgement."""
    return len(content_terms(text)) < MIN_CONTENT


def question_terms(query: str) -> Counter[str]:
    """The question's index terms without the words that frame it; for Chinese, its bigrams without
    single characters (one common character matches nearly every line)."""
    found = list(index_terms(query))
    if any(len(t) == 2 and all(is_han(ch) for ch in t) for t in found):
        found = [t for t in found if not (len(t) == 1 and is_han(t))]
        zh_stop = stopwords("zh")  # a bigram across a function character ("的展", "于未") is no word
        words = [t for t in found if not (is_han(t[0]) and any(ch in zh_stop for ch in t))]
        found = words or found
    kept = [t for t in found if t not in QUESTION_FRAME and t not in QUESTION_FRAME_ZH]
    return Counter(kept or found)


def relevance(texts: Sequence[str], query: str) -> tuple[list[float], Bm25, Counter[str]]:
    """Per line, BM25 relevance to the question (0-1, best line 1); with the BM25 index and the
    question's terms (`spread` turns it into a neighbourhood's relevance)."""
    index = Bm25([list(index_terms(t)) for t in texts])
    terms = question_terms(query)
    raw = index.scores(terms) if terms else [0.0] * len(texts)
    top = max(raw, default=0.0) or 1.0
    own = [value / top for value in raw]
    return own, index, terms


def spread(values: Sequence[float], width: float) -> list[float]:
    """Each position's sum of `values` around it, weighted by exp(-distance / width), scaled to 0-1."""
    n, reach = len(values), int(4 * width)
    out = [0.0] * n
    for i, value in enumerate(values):
        if value <= 0:
            continue
        for j in range(max(0, i - reach), min(n, i + reach + 1)):
            out[j] += value * math.exp(-abs(i - j) / width)
    top = max(out, default=0.0) or 1.0
    return [value / top for value in out]
