"""Plain text with a stray tag is not a web page; a Chinese title line stays with its first sentence."""

from __future__ import annotations

import compactor
from compactor.plugins.chunk import joined_headings
from compactor.text.sentences import split_sentences

PASSAGES = [f"Passage {k}: " + " ".join(f"The town of Ober{k} had {k * 100 + i} people in {1900 + i}, "
                                      "and its mill ran on the river." for i in range(6)) for k in range(5)]


def test_a_stray_tag_in_plain_text_does_not_send_it_through_the_page_extractor() -> None:
    parts = list(PASSAGES)
    parts[0] += '\n<div class="references-small">'  # an unclosed tag left in copied text
    out = compactor.compress("\n\n".join(parts), pipeline="generic", budget=10_000)
    assert [f"Passage {k}:" in out for k in range(5)] == [True] * 5  # the extractor dropped the first
    page = ("<html><body><nav>Home | About | Contact</nav><article><p>" + "</p><p>".join(PASSAGES)
            + "</p></article></body></html>")
    kept = compactor.compress(page, pipeline="generic", budget=10_000)
    assert "Home | About" not in kept and "Passage 2:" in kept  # a page is still read as one


def test_a_chinese_title_line_joins_the_sentence_under_it() -> None:
    text = "张世昌\n张世昌，中国足球运动员，司职后卫。他曾效力于北京队。\n\n另一段。"
    spans = joined_headings(text, split_sentences(text))
    first = text[spans[0][0]:spans[0][1]]
    assert first.startswith("张世昌\n张世昌，中国足球运动员") and "他曾效力" not in first
    ended = "这是一个完整的句子。\n下一句。"  # a line that ends a sentence is no title
    assert joined_headings(ended, split_sentences(ended)) == split_sentences(ended)
