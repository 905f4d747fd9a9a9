"""Benchmark main-content extraction against gold article text.

Runs ``compactor.plugins.clean.html.extract_main_text`` (and trafilatura, when it is
importable) over the shared evaluation pages and prints token-level precision / recall / F1
in the style of the scrapinghub article-extraction-benchmark: both texts are tokenized into
words (each CJK character is its own token), compared as bags (multiset intersection) per
page, and the per-page scores are averaged per dataset.

Usage::

    python benchmarks/html_extraction.py [--limit N] [--dataset NAME] [--no-trafilatura]

The data is looked up at ``../shared/eval`` relative to the repository root, or in the
folder named by the ``COMPACTOR_EVAL_DIR`` environment variable.
"""

from __future__ import annotations

import argparse
import gzip
import importlib.util
import json
import re
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from evaldata import REPO_ROOT, eval_dir
from measure import print_environment

DATASETS = ("web-article-extraction", "web-readability-testpages")

_CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af"
_TOKEN_RE = re.compile(rf"[{_CJK}]|[^\W_{_CJK}]+")

Extractor = Callable[[str], str]


def _load_ours() -> Extractor:
    """Import the extractor, falling back to loading the file by path when not installed."""
    try:
        from compactor.plugins.clean.html import extract_main_text
    except ImportError:
        path = REPO_ROOT / "plugins" / "html_extract.py"
        spec = importlib.util.spec_from_file_location("_compactor_html_extract", path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module  # dataclasses need the module registered
        spec.loader.exec_module(module)
        extract_main_text = module.extract_main_text
    return lambda html: extract_main_text(html).text


def _trafilatura_variants() -> dict[str, Extractor]:
    """Trafilatura baselines, or nothing when it is not installed."""
    try:
        import trafilatura
    except Exception:  # ImportError, or a broken optional dependency such as lxml.html.clean
        return {}

    def run(**kwargs: bool) -> Extractor:
        def extract(html: str) -> str:
            out = trafilatura.extract(html, include_comments=False, include_tables=True, **kwargs)
            return out or ""

        return extract

    return {
        "trafilatura": run(),
        "trafilatura(precision)": run(favor_precision=True),
        "trafilatura(recall)": run(favor_recall=True),
    }


def tokenize(text: str) -> list[str]:
    """Words, with every CJK character counted as its own token."""
    return _TOKEN_RE.findall(text)


def prf(predicted: str, gold: str) -> tuple[float, float, float]:
    """Bag-of-tokens precision, recall and F1 of one page (empty vs empty counts as perfect)."""
    pred, ref = Counter(tokenize(predicted)), Counter(tokenize(gold))
    if not pred and not ref:
        return 1.0, 1.0, 1.0
    if not pred or not ref:
        return 0.0, 0.0, 0.0
    common = sum((pred & ref).values())
    p, r = common / sum(pred.values()), common / sum(ref.values())
    return p, r, (2 * p * r / (p + r) if common else 0.0)


def load_pages(root: Path, dataset: str, limit: int | None) -> list[tuple[str, str, str]]:
    """(id, html, gold_text) for each page of one dataset."""
    folder = root / dataset
    pages = []
    with open(folder / "pages.jsonl", encoding="utf-8") as fh:
        for line in fh:
            row = json.loads(line)
            with gzip.open(folder / row["html_path"], "rb") as gz:
                html = gz.read().decode("utf-8", errors="replace")
            pages.append((row["id"], html, row["gold_text"]))
            if limit is not None and len(pages) >= limit:
                break
    return pages


def evaluate(extractors: dict[str, Extractor],
             pages: list[tuple[str, str, str]]) -> dict[str, dict[str, float]]:
    """Mean P/R/F1 over the pages per extractor, plus throughput in pages per CPU second. The
    extractors take turns page by page (order rotated), so machine load hits them alike."""
    names = list(extractors)
    scores: dict[str, list[tuple[float, float, float]]] = {name: [] for name in names}
    cpu = dict.fromkeys(names, 0.0)
    for index, (_page_id, html, gold) in enumerate(pages):
        shift = index % len(names)
        for name in names[shift:] + names[:shift]:
            start = time.process_time()
            try:
                text = extractors[name](html)
            except Exception:  # a crashing extractor scores zero on that page
                text = ""
            cpu[name] += time.process_time() - start
            scores[name].append(prf(text, gold))
    results = {}
    for name in names:
        n = len(scores[name]) or 1
        results[name] = {
            "pages": float(len(scores[name])),
            "precision": sum(s[0] for s in scores[name]) / n,
            "recall": sum(s[1] for s in scores[name]) / n,
            "f1": sum(s[2] for s in scores[name]) / n,
            "pages_per_s": len(scores[name]) / cpu[name] if cpu[name] else 0.0,
        }
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, default=None, help="pages per dataset")
    parser.add_argument("--dataset", choices=DATASETS, action="append", help="only these")
    parser.add_argument("--no-trafilatura", action="store_true", help="skip the baseline")
    args = parser.parse_args(argv)
    print_environment(["trafilatura"])

    eval_root = eval_dir()
    if not eval_root.is_dir():
        print(f"evaluation data not found at {eval_root} (set COMPACTOR_EVAL_DIR)", file=sys.stderr)
        return 2

    extractors: dict[str, Extractor] = {"compactor": _load_ours()}
    if not args.no_trafilatura:
        extractors.update(_trafilatura_variants())

    header = f"{'dataset':<28}{'extractor':<25}{'pages':>6}{'P':>8}{'R':>8}{'F1':>8}{'pages/cpu s':>12}"
    print(header)
    print("-" * len(header))
    for dataset in args.dataset or DATASETS:
        if not (eval_root / dataset / "pages.jsonl").is_file():
            print(f"{dataset:<28}(missing)")
            continue
        pages = load_pages(eval_root, dataset, args.limit)
        for name, m in evaluate(extractors, pages).items():
            print(
                f"{dataset:<28}{name:<25}{int(m['pages']):>6}{m['precision']:>8.3f}"
                f"{m['recall']:>8.3f}{m['f1']:>8.3f}{m['pages_per_s']:>12.1f}",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
