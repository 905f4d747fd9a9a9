"""compactor.text.templates: one template filled with different names or numbers is one group."""

from __future__ import annotations

import random
import time

from compactor.text.templates import TemplateGroups, group_ranks, shingle_set, skeleton


def test_skeleton_masks_names_and_numbers() -> None:
    assert skeleton("Anna Berg joined the choir in 1998.") == ["N", "N", "joined", "the", "choir", "in", "#"]
    assert skeleton("The choir sang.")[0] == "the"  # a capitalised stop word is a word, not a name
    assert skeleton("王伟在1998年加入合唱团") == ["王", "伟", "在", "#", "年", "加", "入", "合", "唱", "团"]


def test_members_of_one_template_rank_in_order_and_others_lead() -> None:
    texts = ["Anna Berg joined the choir in 1998.", "Tom Li joined the choir in 2004.",
             "Marta Ruiz founded the choir in 1962.", "The weather in Paris was sunny all week.",
             "Paul Ek joined the choir in 1977."]
    assert group_ranks(texts) == [0, 1, 0, 0, 2]


def test_chinese_names_are_slots_too() -> None:
    texts = ["王建国在1998年加入了合唱团。", "李晓梅在2004年加入了合唱团。", "张伟在2011年加入了合唱团。",
             "马丽于1962年组建了合唱团。"]
    assert group_ranks(texts) == [0, 1, 2, 0]


def test_short_texts_are_never_grouped() -> None:
    assert shingle_set("Yes, Anna.") == frozenset()
    assert group_ranks(["Yes, Anna.", "Yes, Tom.", "Yes, Ida."]) == [0, 0, 0]


def test_hash_seed_does_not_change_the_groups() -> None:
    one, two = "Anna Berg joined the choir in 1998.", "Tom Li joined the choir in 2004."
    assert shingle_set(one) == shingle_set(two)
    # a fixed value pins the hash function: Python's `hash` of strings changes with PYTHONHASHSEED
    assert min(shingle_set("a b c d e")) == 415435675


def test_grouping_is_linear_on_thousands_of_unrelated_sentences() -> None:
    rng = random.Random(0)
    words = ["the", "of", "a", "to", "and", "choir", "bridge", "river", "said", "year", "people", "went",
             "came", "house", "city", "road"]
    texts = [" ".join(rng.choice(words) for _ in range(20)) for _ in range(4000)]
    groups = TemplateGroups()
    started = time.process_time()
    for text in texts:
        groups.add(text)
    assert time.process_time() - started < 2.0  # about 0.2 s; quadratic work would take minutes


def test_assign_names_the_group_and_add_its_rank() -> None:
    groups = TemplateGroups()
    first = groups.assign("Anna Berg joined the choir in 1998.")
    assert first is not None
    assert groups.assign("The weather in Paris was sunny all week.") != first
    assert groups.assign("Tom Li joined the choir in 2004.") == first
    assert groups.add("Paul Ek joined the choir in 1977.") == 2  # the third member of the first group
    assert groups.assign("Yes, Anna.") is None  # too short to group


def test_chinese_records_with_a_name_and_a_place_share_a_template() -> None:
    # a name and a place of two or three characters each in a dozen characters: English's threshold
    # keeps the third record, which differs from the first in both, apart
    texts = ["曾磊于1971年加入清溪镇合唱团。", "蔡刚于1993年加入清溪镇合唱团。",
             "北京是中国的首都，有很多历史建筑。", "王伟于1988年加入青石镇合唱团。"]
    assert group_ranks(texts) == [0, 1, 0, 2]
    assert group_ranks(texts, han_threshold=0.55) == [0, 1, 0, 0]
