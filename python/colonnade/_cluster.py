"""``colonnade.Cluster``: running ``ps-shard`` processes seen from Python:
train on them, list and drop their models, export and query vectors. Every
call goes through the native module's ``colonnade`` commands (``train``,
``models``, ``export``), with the same TLS files and token flags."""

from __future__ import annotations

import json
import os
import tempfile
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

from . import _native
from ._vectors import PathLike, load


def _hex(fingerprint: Union[str, int]) -> str:
    """A model's fingerprint as the CLI takes it (16 hex digits)."""
    return f"{fingerprint:016x}" if isinstance(fingerprint, int) else fingerprint


class Cluster:
    """Shards at ``shards`` (``host:port``, in shard order). ``tls`` is a
    dict with ``ca`` (the CA that signed the shards' certificates) and,
    for mutual TLS, ``cert`` and ``key``; ``token`` is the cluster's bearer
    token (or ``token_file``, a file holding it)::

        cluster = colonnade.Cluster(["10.0.0.1:50051", "10.0.0.2:50051"],
                                    tls={"ca": "ca.pem"}, token_file="token")
        model = cluster.Word2Vec(corpus_file="corpus.txt", sg=1, output="model.h5")
        cluster.models()
    """

    def __init__(
        self,
        shards: Sequence[str],
        tls: Optional[Dict[str, PathLike]] = None,
        token: Optional[str] = None,
        token_file: Optional[PathLike] = None,
    ):
        if isinstance(shards, str):
            shards = [s for s in shards.split(",") if s]
        if not shards:
            raise ValueError("give at least one shard endpoint (host:port)")
        self.shards = list(shards)
        unknown = set(tls or {}) - {"ca", "cert", "key"}
        if unknown:
            raise ValueError(f"tls takes ca, cert and key, not {', '.join(sorted(unknown))}")
        self.tls = {k: os.fspath(v) for k, v in (tls or {}).items()}
        if token is not None and token_file is not None:
            raise ValueError("give token or token_file, not both")
        self._token_dir = None
        if token is not None:
            # The flag takes a file: one readable by this user only.
            self._token_dir = tempfile.TemporaryDirectory(prefix="colonnade-token-")
            token_file = os.path.join(self._token_dir.name, "token")
            fd = os.open(token_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write(token)
        self.token_file = os.fspath(token_file) if token_file is not None else None

    def _connection(self) -> List[str]:
        argv: List[str] = []
        for key in ("ca", "cert", "key"):
            if key in self.tls:
                argv += [f"--tls-{key}", self.tls[key]]
        if self.token_file is not None:
            argv += ["--auth-token-file", self.token_file]
        return argv

    def _connect_args(self) -> List[str]:
        return ["--shards", ",".join(self.shards)] + self._connection()

    def Word2Vec(self, *args: Any, **kwargs: Any):
        """:class:`colonnade.Word2Vec` trained on these shards (this process
        is one worker; ``extra_args=["--worker-index", "1", "--num-workers",
        "2"]`` makes it one of several)."""
        from ._word2vec import Word2Vec

        return Word2Vec(*args, shards=self, **kwargs)

    def models(self) -> List[Dict[str, Any]]:
        """Every shard with the models it holds (what ``colonnade models
        list --json`` prints): one dict per shard, ``models`` a list."""
        raw = _native.run(["models", "list"] + self._connect_args())
        return json.loads(raw)["shards"]

    def drop(self, fingerprint: Union[str, int], delete_checkpoints: bool = False) -> None:
        """Drops a model from every shard (``colonnade models drop``)."""
        argv = ["models", "drop", "--fingerprint", _hex(fingerprint)] + self._connect_args()
        if delete_checkpoints:
            argv.append("--delete-checkpoints")
        _native.run(argv)

    def export(
        self,
        vocab: PathLike,
        output: Optional[PathLike] = None,
        fingerprint: Optional[Union[str, int]] = None,
        extra_args: Sequence[str] = (),
    ):
        """Pulls a model's vectors from the shards (``colonnade export``) and
        returns them (gensim ``KeyedVectors``, or ``colonnade.Vectors``).
        ``vocab`` is the vocabulary file the model was trained on
        (``extra_args=["--save-vocab", path]`` when training); ``output``
        keeps the HDF5 file; ``fingerprint`` picks a model when the shards
        hold several."""
        with tempfile.TemporaryDirectory(prefix="colonnade-export-") as tmp:
            out = os.fspath(output) if output is not None else os.path.join(tmp, "model.h5")
            argv = ["export", "--vocab", os.fspath(vocab), "--output", out] + self._connect_args()
            if fingerprint is not None:
                argv += ["--fingerprint", _hex(fingerprint)]
            _native.run(argv + [str(a) for a in extra_args])
            return load(out)

    def similar(
        self,
        word: Union[str, Sequence[str]],
        vocab: PathLike,
        topn: int = 10,
        fingerprint: Optional[Union[str, int]] = None,
    ) -> List[Tuple[str, float]]:
        """The ``topn`` nearest words by cosine (as ``colonnade similar``
        ranks them) of a model on the shards, exported first."""
        return self.export(vocab, fingerprint=fingerprint).most_similar(word, topn=topn)

    def __repr__(self) -> str:
        return f"Cluster({self.shards!r})"
