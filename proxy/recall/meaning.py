"""Meaning: a static embedding of text, so recall finds a paraphrase that shares no word
with what was said ("what pet does she have?" for "I adopted a rescue dog named Max").

The model is WordLlama's (`l2_supercat`, MIT): a vector for each of its tokenizer's
32,000 tokens, and a text's vector is the mean of its tokens'. No network, no GPU and no
inference library: the weights and the tokenizer ship as files inside the `wordllama`
wheel, read here with `safetensors` and `tokenizers` (the package's own code is not
imported: it configures the root logger). A text costs a tokenization and a sum; 3,000
messages embed in about 0.1 s on one core. Its first `DIMENSIONS` dimensions are kept
(the model is trained so a prefix is itself an embedding), as float16: 256 bytes a unit.
On LoCoMo's development half, ranking messages by BM25 and by this vector together
(reciprocal ranks) brings 5-6 points more of the evidence into the same tokens than
BM25 alone (docs/performance.md, `locomo`).
"""

from __future__ import annotations

import base64
import functools
import importlib.util
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from safetensors import safe_open
from tokenizers import Tokenizer

__all__ = ["DIMENSIONS", "decoded", "encoded", "vectors"]

DIMENSIONS = 128
_CHARS = 2000  # of a text: what it is about, and bounded work for a 5 MB tool output
_WEIGHTS = "weights/l2_supercat_256.safetensors"
_TOKENIZER = "tokenizers/l2_supercat_tokenizer_config.json"


def vectors(texts: Sequence[str]) -> np.ndarray:
    """One unit-length float16 vector of `DIMENSIONS` per text (zeros for a text of no
    known token), from its first `_CHARS` characters."""
    table, tokenizer = _model()
    out = np.zeros((len(texts), DIMENSIONS), dtype=np.float32)
    if not texts:
        return out.astype(np.float16)
    encoded_texts = tokenizer.encode_batch(
        [text[:_CHARS] for text in texts], add_special_tokens=False
    )
    lengths = np.fromiter((len(e.ids) for e in encoded_texts), dtype=np.int64, count=len(texts))
    if lengths.sum():
        ids = np.concatenate([np.asarray(e.ids, dtype=np.int64) for e in encoded_texts])
        starts = np.concatenate(([0], np.cumsum(lengths)[:-1]))
        present = lengths > 0
        sums = np.add.reduceat(table[ids], starts[present], axis=0)
        out[present] = sums / lengths[present, None]
    norms = np.linalg.norm(out, axis=1, keepdims=True)
    np.divide(out, norms, out=out, where=norms > 0)
    return out.astype(np.float16)


def encoded(array: np.ndarray) -> str:
    """`array` (float16 rows of `DIMENSIONS`) as text for a JSON record."""
    return base64.b64encode(np.ascontiguousarray(array, dtype=np.float16).tobytes()).decode()


def decoded(text: str, rows: int) -> np.ndarray:
    """The `rows` vectors `encoded` wrote; zeros (no meaning known) if it wrote others."""
    array = np.frombuffer(base64.b64decode(text), dtype=np.float16)
    if array.size != rows * DIMENSIONS:
        return np.zeros((rows, DIMENSIONS), dtype=np.float16)
    return array.reshape(rows, DIMENSIONS)


@functools.cache
def _model() -> tuple[np.ndarray, Tokenizer]:
    """The token table (float32, `DIMENSIONS` wide) and the tokenizer, read once."""
    found = importlib.util.find_spec("wordllama")
    if found is None or not found.submodule_search_locations:
        raise RuntimeError("the wordllama package (its model files) is not installed")
    root = Path(next(iter(found.submodule_search_locations)))
    with safe_open(str(root / _WEIGHTS), framework="np") as weights:
        table = weights.get_tensor("embedding.weight")[:, :DIMENSIONS]
    tokenizer = Tokenizer.from_file(str(root / _TOKENIZER))
    tokenizer.no_padding()
    tokenizer.no_truncation()
    return np.ascontiguousarray(table, dtype=np.float32), tokenizer
