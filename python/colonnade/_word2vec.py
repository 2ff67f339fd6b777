"""``colonnade.Word2Vec``: gensim's ``Word2Vec`` constructor, trained by
Colonnade's Rust trainer in this process (``_native.run``, the same code as
``colonnade train``), with the GIL released while it trains."""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import tempfile
import time
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Union

import numpy as np

from . import _native
from ._vectors import PathLike, keyed_vectors, read, write_word2vec

logger = logging.getLogger("colonnade")

# gensim's cap on sentence length: Colonnade's corpus reader cuts lines there.
MAX_SENTENCE = 10000
# What a joined sentence must not hold: the reader splits on ASCII
# whitespace, so a token with some (or an empty token) would read back as
# other tokens.
_BAD = re.compile(r"[\t\n\r\x0b\x0c]|  |^ | $")


def _paths(corpus_file) -> List[str]:
    if isinstance(corpus_file, (str, bytes, os.PathLike)):
        return [os.fsdecode(corpus_file)]
    return [os.fsdecode(p) for p in corpus_file]


def write_sentences(sentences: Iterable[Sequence[str]], path: str) -> int:
    """Streams ``sentences`` (token lists) to ``path``, one line each, as the
    trainer's corpus reader reads them: nothing is held in memory. Returns
    the number of sentences. Tokens must be non-empty strings without
    whitespace (the reader splits lines on whitespace)."""
    if isinstance(sentences, (str, bytes)):
        raise TypeError("sentences must be an iterable of token lists, not a string")
    n = 0
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        write = f.write
        for n, sentence in enumerate(sentences, 1):
            if isinstance(sentence, str):
                raise TypeError(
                    f"sentence {n} is a string; sentences must be lists of tokens "
                    "(e.g. line.split())"
                )
            if not isinstance(sentence, (list, tuple)):
                sentence = list(sentence)
            if not sentence:
                continue
            line = " ".join(sentence)
            if not line or line.count(" ") != len(sentence) - 1 or _BAD.search(line):
                raise ValueError(
                    f"sentence {n}: tokens must be non-empty strings without whitespace: "
                    f"{list(sentence)!r:.200}"
                )
            write(line)
            write("\n")
    return n


class Word2Vec:
    """Trains word2vec (skip-gram or CBOW with negative sampling) with
    gensim's argument names and defaults::

        model = colonnade.Word2Vec(corpus_file="corpus.txt", vector_size=100, sg=1)
        model.wv.most_similar("king")

    ``sentences`` may be any iterable of token lists (a generator too: it is
    read once, streamed to a temporary corpus file); ``corpus_file`` a path or
    a list of paths, plain or compressed (gzip, xz, zstd, bzip2). Arguments of
    gensim that Colonnade does not support raise ``NotImplementedError``.

    Colonnade's own arguments: ``shards`` (running ``ps-shard`` endpoints, or
    a :class:`colonnade.Cluster`) trains on a cluster instead of one
    embedded shard; ``output`` keeps the HDF5 file the run writes;
    ``epoch_callback(info)`` is called after each epoch with a dict
    (``epoch``, ``loss``, ``words_per_sec``, ``words``, ``alpha``);
    ``extra_args`` passes further ``colonnade train`` flags.
    """

    def __init__(
        self,
        sentences: Optional[Iterable[Sequence[str]]] = None,
        corpus_file: Union[PathLike, Sequence[PathLike], None] = None,
        vector_size: int = 100,
        alpha: float = 0.025,
        window: int = 5,
        min_count: int = 5,
        max_vocab_size: Optional[int] = None,
        sample: float = 1e-3,
        seed: int = 1,
        workers: int = 3,
        min_alpha: float = 0.0001,
        sg: int = 0,
        hs: int = 0,
        negative: int = 5,
        ns_exponent: float = 0.75,
        cbow_mean: int = 1,
        hashfxn: Callable = hash,
        epochs: int = 5,
        null_word: int = 0,
        trim_rule: Optional[Callable] = None,
        sorted_vocab: int = 1,
        batch_words: int = 10000,
        compute_loss: bool = False,
        callbacks: Sequence[Any] = (),
        comment: Optional[str] = None,
        max_final_vocab: Optional[int] = None,
        shrink_windows: bool = True,
        max_sentence_length: int = MAX_SENTENCE,
        *,
        shards: Union[Sequence[str], "Cluster", None] = None,  # noqa: F821
        output: Optional[PathLike] = None,
        epoch_callback: Optional[Callable[[Dict[str, Any]], None]] = None,
        extra_args: Sequence[str] = (),
        _graph: Optional[List[str]] = None,
    ):
        unsupported = {
            "hs=1 (hierarchical softmax)": hs != 0,
            "cbow_mean=0 (Colonnade's CBOW averages the context vectors)": cbow_mean != 1,
            "max_vocab_size (use max_final_vocab)": max_vocab_size is not None,
            "trim_rule": trim_rule is not None,
            "sorted_vocab=0 (the vocabulary is always sorted by frequency)": not sorted_vocab,
            "null_word=1": null_word != 0,
            "shrink_windows=False": not shrink_windows,
            f"max_sentence_length other than {MAX_SENTENCE}": max_sentence_length != MAX_SENTENCE,
        }
        given = [name for name, yes in unsupported.items() if yes]
        if given:
            raise NotImplementedError(f"Colonnade does not support {', '.join(given)}")
        if negative < 1:
            raise ValueError(f"negative must be at least 1 (Colonnade trains with negative sampling), not {negative}")
        for name, value in (("vector_size", vector_size), ("window", window), ("epochs", epochs), ("workers", workers)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name} must be a positive integer, not {value!r}")
        if not 0 < alpha:
            raise ValueError(f"alpha must be positive, not {alpha!r}")
        if sentences is not None and corpus_file is not None:
            raise TypeError("give sentences or corpus_file, not both")
        self.vector_size, self.window, self.min_count = vector_size, window, min_count
        self.sample, self.seed, self.workers = sample, seed, workers
        self.alpha, self.min_alpha, self.sg, self.negative = alpha, min_alpha, sg, negative
        self.ns_exponent, self.epochs, self.max_final_vocab = ns_exponent, epochs, max_final_vocab
        self.callbacks = list(callbacks)
        self.epoch_callback = epoch_callback
        self.compute_loss = compute_loss
        self.output = output
        self.extra_args = [str(a) for a in extra_args]
        self._graph = _graph
        self._shards = shards
        self.wv = None
        self.summary: Optional[Dict[str, Any]] = None
        self.epoch_losses: List[Optional[float]] = []
        self.corpus_count = 0
        self.corpus_total_words = 0
        self._dir: Optional[tempfile.TemporaryDirectory] = None
        if sentences is not None or corpus_file is not None or _graph is not None:
            self.train(corpus_iterable=sentences, corpus_file=corpus_file)

    # -- training -----------------------------------------------------------

    def _argv(self, corpus: List[str], out: str) -> List[str]:
        argv = ["train"]
        if self._graph is not None:
            argv += self._graph
        else:
            argv += ["--corpus", ",".join(corpus)]
            argv += ["--min-count", str(self.min_count), "--sample", repr(float(self.sample))]
        argv += [
            "--size", str(self.vector_size), "--window", str(self.window),
            "--negative", str(self.negative), "--alpha", repr(float(self.alpha)),
            "--min-alpha", repr(float(self.min_alpha)), "--iter", str(self.epochs),
            "--threads", str(self.workers), "--seed", str(self.seed),
            "--sampling-power", repr(float(self.ns_exponent)), "--output", out,
        ]
        if not self.sg:
            argv.append("--cbow")
        if self.max_final_vocab is not None:
            argv += ["--max-vocab", str(self.max_final_vocab)]
        shards = self._shards
        if shards is not None:
            from ._cluster import Cluster

            if isinstance(shards, Cluster):
                argv += shards._connect_args()
            else:
                argv += ["--shards", ",".join(shards)]
        return argv + self.extra_args

    def train(
        self,
        corpus_iterable: Optional[Iterable[Sequence[str]]] = None,
        corpus_file: Union[PathLike, Sequence[PathLike], None] = None,
        epochs: Optional[int] = None,
        **_ignored: Any,
    ) -> "Word2Vec":
        """Trains on ``corpus_iterable`` or ``corpus_file`` (the vocabulary
        is counted from the same corpus) and sets ``wv``. gensim's
        ``total_examples``/``total_words`` are accepted and not needed."""
        if epochs is not None:
            self.epochs = epochs
        if corpus_iterable is None and corpus_file is None and self._graph is None:
            raise TypeError("give sentences (corpus_iterable) or corpus_file")
        self._dir = tempfile.TemporaryDirectory(prefix="colonnade-")
        tmp = self._dir.name
        corpus: List[str] = []
        if corpus_iterable is not None:
            corpus = [os.path.join(tmp, "corpus.txt")]
            self.corpus_count = write_sentences(corpus_iterable, corpus[0])
        elif corpus_file is not None:
            corpus = _paths(corpus_file)
        out = os.fspath(self.output) if self.output is not None else os.path.join(tmp, "model.h5")
        self._h5 = out
        for cb in self.callbacks:
            getattr(cb, "on_train_begin", lambda m: None)(self)
        tracker = _Tracker(self)
        try:
            raw = _native.run(self._argv(corpus, out), tracker.poll)
        except KeyboardInterrupt:
            # Training stopped after the minibatches in flight and the run
            # wrote what it had trained: keep it, then let Ctrl-C through.
            if os.path.exists(out):
                self._load(out)
                logger.warning("interrupted: model.wv holds the vectors trained until then")
            raise
        self.summary = json.loads(raw) if raw else {}
        tracker.finish(self.summary.get("epoch_loss") or [])
        self.corpus_total_words = int(self.summary.get("words", 0)) // max(1, self.epochs)
        self._load(out)
        for cb in self.callbacks:
            getattr(cb, "on_train_end", lambda m: None)(self)
        s = self.summary
        logger.info(
            "trained %d words (%d epochs) in %.1f s: %.0f words/s, final loss %s",
            s.get("tokens", 0), self.epochs, s.get("seconds", 0.0),
            s.get("tokens_per_second", 0.0), s.get("final_loss"),
        )
        return self

    def _load(self, path: str) -> None:
        words, vectors = read(path)
        self.wv = keyed_vectors(words, vectors)

    def get_latest_training_loss(self) -> float:
        """The mean loss per pair of the last epoch (gensim sums the loss
        instead; Colonnade always computes it)."""
        last = [l for l in self.epoch_losses if l is not None]
        return float(last[-1]) if last else 0.0

    # -- files --------------------------------------------------------------

    def _trained(self) -> None:
        if self.wv is None:
            raise RuntimeError("the model is not trained yet: give sentences or corpus_file")

    def save_hdf5(self, path: PathLike) -> None:
        """Writes the HDF5 file ``colonnade train --output`` writes (vectors,
        words, counts and the run's provenance): the run's own file, copied."""
        self._trained()
        if os.path.abspath(os.fspath(path)) != os.path.abspath(self._h5):
            shutil.copyfile(self._h5, path)

    def save_word2vec_format(self, path: PathLike, binary: bool = False) -> None:
        """Writes the word2vec text (or ``binary=True``) file that
        ``--output-text`` (``--output-binary``) writes."""
        self._trained()
        write_word2vec(path, self.wv.index_to_key, self.wv.vectors, binary)

    # -- graphs ---------------------------------------------------------------

    @classmethod
    def from_graph(
        cls,
        edges: Union[PathLike, Iterable[Sequence[Any]]],
        walks_per_node: int = 10,
        walk_length: int = 40,
        p: float = 1.0,
        q: float = 1.0,
        directed: bool = False,
        **kwargs: Any,
    ) -> "Word2Vec":
        """DeepWalk (node2vec with ``p``/``q``): node vectors trained on
        random walks over ``edges``, an edge-list file (``u v`` or ``u v
        weight`` per line) or an iterable of ``(u, v)`` / ``(u, v, weight)``.
        Walks are generated in Rust while training. ``min_count`` and
        ``sample`` default to the CLI's graph defaults (1 and 0) unless
        given; the other arguments are :class:`Word2Vec`'s (``sg=1`` is
        DeepWalk's)."""
        tmp = tempfile.TemporaryDirectory(prefix="colonnade-graph-")
        if isinstance(edges, (str, bytes, os.PathLike)):
            path = os.fsdecode(edges)
        else:
            path = os.path.join(tmp.name, "edges.txt")
            with open(path, "w", encoding="utf-8") as f:
                for i, e in enumerate(edges, 1):
                    if len(e) not in (2, 3):
                        raise ValueError(f"edge {i} must be (u, v) or (u, v, weight), not {e!r:.100}")
                    fields = [str(x) for x in e]
                    if any(not x or any(c.isspace() for c in x) for x in fields[:2]):
                        raise ValueError(f"edge {i}: node ids must be non-empty and hold no whitespace: {e!r:.100}")
                    f.write(" ".join(fields) + "\n")
        graph = [
            "--graph", path, "--walks-per-node", str(walks_per_node),
            "--walk-length", str(walk_length), "--p", repr(float(p)), "--q", repr(float(q)),
        ]
        if directed:
            graph.append("--directed")
        if "min_count" in kwargs:
            graph += ["--min-count", str(kwargs["min_count"])]
        if "sample" in kwargs:
            graph += ["--sample", repr(float(kwargs["sample"]))]
        kwargs.setdefault("sg", 1)
        model = cls(_graph=graph, **kwargs)
        model._graph_dir = tmp
        return model


class _Tracker:
    """Follows a run from its counters: logs progress through ``logging``
    every few seconds and calls the epoch callbacks as epochs end."""

    def __init__(self, model: Word2Vec):
        self.model = model
        self.start = time.monotonic()
        self.last_log = self.start
        self.said = 0  # epochs reported
        self.info: Dict[str, Any] = {}

    def poll(self, c: Dict[str, Any]) -> None:
        self.info = c
        now = time.monotonic()
        rate = c["words"] / max(now - self.start, 1e-9)
        if now - self.last_log >= 5.0:
            self.last_log = now
            logger.info(
                "EPOCH %d: %d words read, %.0f words/s, alpha %.6f",
                c["epoch"] + 1, c["words"], rate, c["alpha"],
            )
        # An epoch is over once a minibatch of the next one has trained.
        while self.said < c["epoch"]:
            self._epoch_end(self.said, c["epoch_loss"], rate)

    def finish(self, epoch_loss: List[Optional[float]]) -> None:
        rate = self.info.get("words", 0) / max(time.monotonic() - self.start, 1e-9)
        if self.model.summary:
            rate = self.model.summary.get("tokens_per_second", rate)
        self.model.epoch_losses = list(epoch_loss)
        while self.said < self.model.epochs:
            self._epoch_end(self.said, epoch_loss, rate)

    def _epoch_end(self, epoch: int, losses: List[Optional[float]], rate: float) -> None:
        loss = losses[epoch] if epoch < len(losses) else None
        self.said = epoch + 1
        self.model.epoch_losses = list(losses)
        info = {
            "epoch": epoch + 1,
            "loss": loss,
            "words_per_sec": rate,
            "words": self.info.get("words", 0),
            "alpha": self.info.get("alpha"),
        }
        logger.info("EPOCH %d done: loss %s, %.0f words/s", epoch + 1, loss, rate)
        if self.model.epoch_callback is not None:
            self.model.epoch_callback(info)
        for cb in self.model.callbacks:
            getattr(cb, "on_epoch_end", lambda m: None)(self.model)
