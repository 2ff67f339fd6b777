"""Colonnade from Python: word2vec with gensim's ``Word2Vec`` API, trained
by Colonnade's Rust trainer in this process (one embedded shard by default,
or running ``ps-shard`` processes through :class:`Cluster`).

    import colonnade
    model = colonnade.Word2Vec(corpus_file="corpus.txt", vector_size=100, sg=1, workers=2)
    print(model.wv.most_similar("king"))

``model.wv`` is gensim's ``KeyedVectors`` when gensim is installed, else
:class:`Vectors`; :func:`load` reads any vector file Colonnade writes (HDF5,
word2vec text or binary). Progress goes to the ``colonnade`` logger.
"""

from ._native import __version__
from ._vectors import Vectors, load
from ._word2vec import Word2Vec
from ._cluster import Cluster

__all__ = ["Word2Vec", "Cluster", "Vectors", "load", "__version__"]
