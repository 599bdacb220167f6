"""Two runs' reproduction reports cell by cell: which cells moved, and which verdicts changed (issue 46, item 4).

    python benchmarks/compare_reports.py BEFORE.csv AFTER.csv [--labels A B] [--rtol 1e-9] [--out changes.md]

BEFORE.csv and AFTER.csv are two runs' ``results/tables/paper_comparison.csv`` (e.g. ``make run`` at two commits, or
on two machines: the kept ones lie in ``benchmarks/records/make_run/``). Prints the verdict counts of each (SA at
Algorithm 2's loss arg-min, as the report's own verdict line counts them), the before x after transition table and
every cell whose value moved by more than ``--rtol`` (relative) or whose verdict changed, the verdict changes first
(:func:`stochattn.experiments.paper_comparison.report_changes`). ``--out`` writes the same markdown (atomically).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd

from stochattn.experiments.paper_comparison import changes_markdown, report_changes
from stochattn.io import atomic_path


def main(argv: list[str] | None = None) -> str:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("before", type=Path)
    parser.add_argument("after", type=Path)
    parser.add_argument("--labels", nargs=2, default=("before", "after"), metavar=("BEFORE", "AFTER"))
    parser.add_argument("--rtol", type=float, default=1e-9, help="relative change below which a value has not moved")
    parser.add_argument("--out", type=Path, help="also write the markdown here")
    args = parser.parse_args(argv)
    changes = report_changes(pd.read_csv(args.before), pd.read_csv(args.after), rtol=args.rtol)
    md = changes_markdown(changes, *args.labels)
    print(md, end="")
    if args.out is not None:
        with atomic_path(args.out) as tmp:
            tmp.write_text(md, encoding="utf-8")
    return md


if __name__ == "__main__":
    main()
