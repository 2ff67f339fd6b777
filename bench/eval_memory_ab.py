#!/usr/bin/env python3
"""`colonnade eval` memory, old binary against new, in one run (issue 16).

Runs `eval --vectors H5 --groups G --group-queries N --json` with binary B
(old) and A (new) alternated, B A B A, each sampled every 50 ms for its
RssAnon (the process's own memory), RssFile (the mapped vectors) and
VmHWM. Fails unless both binaries print the same report. Medians per binary
and their ratio go to stdout and a JSON file in --out.

    .venv/bin/python bench/eval_memory_ab.py --old /tmp/colonnade-old \\
        --new target/release/colonnade --vectors cluster.h5 --groups groups.txt
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as c  # noqa: E402
from mapped_eval import run_sampled  # noqa: E402


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--old", type=Path, required=True, help="the old `colonnade` binary (B)")
    p.add_argument("--new", type=Path, required=True, help="the new `colonnade` binary (A)")
    p.add_argument("--vectors", type=Path, required=True)
    p.add_argument("--groups", type=Path, required=True)
    p.add_argument("--group-queries", type=int, default=100)
    p.add_argument("--pairs", type=int, default=2)
    p.add_argument("--work", type=Path, default=Path("/tmp/colonnade-eval-ab"))
    p.add_argument("--out", type=Path, default=c.REPO / "bench" / "results")
    args = p.parse_args()
    c.set_log_name("eval_memory_ab")
    args.work.mkdir(parents=True, exist_ok=True)
    runs: dict[str, list[dict]] = {"old": [], "new": []}
    reports: dict[str, str] = {}
    for i in range(args.pairs):
        for name in ("old", "new"):
            binary = getattr(args, name)
            cmd = [str(binary), "eval", "--vectors", str(args.vectors), "--groups", str(args.groups),
                   "--group-queries", str(args.group_queries), "--json"]
            r = run_sampled(cmd, args.work / f"{name}{i}.log")
            out = r.pop("stdout")
            report = json.loads(out[out.index("{"):])
            report_groups = json.dumps(report["groups"], sort_keys=True)
            if reports.setdefault(name, report_groups) != report_groups:
                raise SystemExit(f"{name} gave two different reports")
            runs[name].append(r)
            c.log(f"{name} {i}: {r['wall_seconds']:.1f} s, RssAnon {r['peak_RssAnon_mb']:.0f} MB, "
                  f"RssFile {r['peak_RssFile_mb']:.0f} MB, VmHWM {r['peak_VmHWM_mb']:.0f} MB")
    if reports["old"] != reports["new"]:
        raise SystemExit(f"the reports differ:\nold {reports['old']}\nnew {reports['new']}")
    med = {name: {k: statistics.median(r[k] for r in rs) for k in rs[0] if k != "returncode"}
           for name, rs in runs.items()}
    ratio = {k: med["new"][k] / med["old"][k] for k in med["new"] if med["old"][k]}
    result = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "machine": c.machine_info(),
              "command": sys.argv, "runs": runs, "medians": med, "new_over_old": ratio,
              "groups_report": json.loads(reports["new"])}
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"eval-memory-ab-{time.strftime('%Y%m%d-%H%M%S')}.json"
    path.write_text(json.dumps(result, indent=1))
    for k, v in ratio.items():
        c.log(f"new/old {k}: {v:.3f} (medians {med['new'][k]:.1f} / {med['old'][k]:.1f})")
    c.log(f"report: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
