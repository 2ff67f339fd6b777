"""Trained vectors in Python: gensim's ``KeyedVectors`` when gensim is
installed, else :class:`Vectors`, a small stand-in with the same names for
what most code uses (``vectors``, ``index_to_key``, ``key_to_index``,
``most_similar``, ``similarity``, ``[word]``). Files are read and written by
the native module, with the CLI's own readers and writers."""

from __future__ import annotations

import os
from typing import Iterable, List, Optional, Sequence, Tuple, Union

import numpy as np

from . import _native

PathLike = Union[str, "os.PathLike[str]"]


class Vectors:
    """Word vectors: row ``i`` of ``vectors`` (float32, ``[words, dim]``) is
    the vector of ``index_to_key[i]``, in the file's order (frequency order
    for Colonnade's outputs)."""

    def __init__(self, index_to_key: List[str], vectors: np.ndarray):
        if vectors.ndim != 2 or vectors.shape[0] != len(index_to_key):
            raise ValueError(
                f"{len(index_to_key)} words need a [{len(index_to_key)}, dim] array, "
                f"not {list(vectors.shape)}"
            )
        self.index_to_key = index_to_key
        self.key_to_index = {w: i for i, w in enumerate(index_to_key)}
        self.vectors = vectors
        self.vector_size = vectors.shape[1]
        self._unit: Optional[np.ndarray] = None

    def __len__(self) -> int:
        return len(self.index_to_key)

    def __contains__(self, word: str) -> bool:
        return word in self.key_to_index

    def __getitem__(self, word: str) -> np.ndarray:
        return self.vectors[self._index(word)]

    def get_vector(self, word: str, norm: bool = False) -> np.ndarray:
        return self._units()[self._index(word)] if norm else self[word]

    def _index(self, word: str) -> int:
        try:
            return self.key_to_index[word]
        except KeyError:
            raise KeyError(f"Key '{word}' not present") from None

    def _units(self) -> np.ndarray:
        if self._unit is None:
            norms = np.linalg.norm(self.vectors, axis=1, keepdims=True)
            self._unit = self.vectors / np.maximum(norms, np.finfo(np.float32).tiny)
        return self._unit

    def similarity(self, w1: str, w2: str) -> float:
        u = self._units()
        return float(u[self._index(w1)] @ u[self._index(w2)])

    def most_similar(
        self,
        positive: Union[str, Sequence[str], None] = None,
        negative: Union[str, Sequence[str], None] = None,
        topn: int = 10,
    ) -> List[Tuple[str, float]]:
        """The ``topn`` words nearest by cosine to the mean of the unit
        vectors of ``positive`` minus those of ``negative`` (gensim's
        3CosAdd), the query words left out."""
        pos = [positive] if isinstance(positive, str) else list(positive or [])
        neg = [negative] if isinstance(negative, str) else list(negative or [])
        if not pos and not neg:
            raise ValueError("cannot compute similarity with no input")
        u = self._units()
        query = np.zeros(self.vector_size, dtype=np.float32)
        for w in pos:
            query += u[self._index(w)]
        for w in neg:
            query -= u[self._index(w)]
        query /= max(float(np.linalg.norm(query)), np.finfo(np.float32).tiny)
        sims = u @ query
        skip = {self.key_to_index[w] for w in pos + neg}
        k = min(len(sims), topn + len(skip))
        best = np.argpartition(-sims, k - 1)[:k] if k < len(sims) else np.arange(len(sims))
        best = best[np.argsort(-sims[best], kind="stable")]
        return [(self.index_to_key[i], float(sims[i])) for i in best if i not in skip][:topn]

    def save_word2vec_format(self, path: PathLike, binary: bool = False) -> None:
        write_word2vec(path, self.index_to_key, self.vectors, binary)


def _gensim_keyed_vectors(words: List[str], vectors: np.ndarray):
    """A gensim KeyedVectors over ``vectors`` without copying them."""
    from gensim.models import KeyedVectors

    kv = KeyedVectors(vector_size=vectors.shape[1], count=0, dtype=np.float32)
    kv.index_to_key = words
    kv.key_to_index = {w: i for i, w in enumerate(words)}
    kv.vectors = vectors
    kv.norms = None
    return kv


def keyed_vectors(words: List[str], vectors: np.ndarray):
    """gensim's KeyedVectors when gensim is installed, else :class:`Vectors`."""
    try:
        return _gensim_keyed_vectors(words, vectors)
    except ImportError:
        return Vectors(words, vectors)


def read(path: PathLike) -> Tuple[List[str], np.ndarray]:
    """The words and the float32 ``[words, dim]`` rows of a vector file:
    HDF5, word2vec text or binary, told by content."""
    words, data, rows, dim = _native.read_vectors(os.fspath(path))
    # A view of the bytearray the native module filled: no second copy.
    return words, np.frombuffer(data, dtype="<f4").reshape(rows, dim)


def load(path: PathLike):
    """Reads a vector file Colonnade (or word2vec, or gensim) wrote: HDF5,
    word2vec text or binary, told by content. Returns gensim's
    ``KeyedVectors`` when gensim is installed, else :class:`Vectors`."""
    words, vectors = read(path)
    return keyed_vectors(words, vectors)


def write_word2vec(path: PathLike, words: Iterable[str], vectors: np.ndarray, binary: bool) -> None:
    """Writes a word2vec text or binary file with the CLI's writer."""
    rows = np.ascontiguousarray(vectors, dtype="<f4")
    if rows.ndim != 2:
        raise ValueError(f"vectors must be [words, dim], not {list(rows.shape)}")
    _native.write_word2vec(os.fspath(path), list(words), rows.tobytes(), rows.shape[1], binary)
