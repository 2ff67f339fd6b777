"""Messages a first day meets (issue 46): log lines with plain values (no
`Some(..)`, seconds not to the nanosecond)."""

from __future__ import annotations

import re
import time

from conftest import free_port, run, train_args

# A float printed with more decimals than anyone reads (timestamps have 6).
LONG_FLOAT = re.compile(r"\d\.\d{7,}")


def test_logs_print_values_plainly(tmp_path, corpus_100k, shard_launcher):
    res = run(train_args(corpus_100k, size=8, output_text=tmp_path / "m.txt"))
    assert "training done" in res.stderr and "written" in res.stderr, res.describe()
    assert "Some(" not in res.stderr, res.describe()
    assert not LONG_FLOAT.search(res.stderr), res.describe()
    written = re.search(r"written .*seconds=(\S+)", res.stderr)
    assert written and re.fullmatch(r"\d+(\.\d{1,3})?", written.group(1)), res.describe()

    # A shard's start-up line: its data dir and health port as they were given.
    data_dir = tmp_path / "s0"
    health = f"127.0.0.1:{free_port()}"
    shard_launcher.start(1, args=("--data-dir", data_dir, "--health-listen", health))
    deadline = time.monotonic() + 20
    while "ps-shard serving" not in shard_launcher.logs() and time.monotonic() < deadline:
        time.sleep(0.05)
    log = shard_launcher.logs()
    assert f"data_dir={data_dir}" in log and f"health_listen={health}" in log, log
    assert "Some(" not in log and "None" not in log, log
