# SPDX-License-Identifier: Apache-2.0
"""The medians of an interleaved A/B run (bench/typed/ab_dsbench.sh, alpha_build.sh): ROWS holds
one markdown row per round and binary, "| round | base or new | value | value | ...". Prints,
per binary, "| median | NAME | median (min-max) | ... |", each column with its DECIMALS, and with
--ratio the first column's median over the second's.
    python3 ab_medians.py ROWS DECIMALS... [--ratio]"""
import statistics
import sys

args = [a for a in sys.argv[1:] if a != "--ratio"]
rows = [line.strip("|\n").split("|") for line in open(args[0])]
digits = [int(d) for d in args[1:]]
for b in ("base", "new"):
    columns = [[float(x[2 + i]) for x in rows if x[1].strip() == b] for i in range(len(digits))]
    medians = [statistics.median(c) for c in columns]
    cells = [f"{m:.{d}f} ({min(c):.{d}f}-{max(c):.{d}f})"
             for m, c, d in zip(medians, columns, digits)]
    if "--ratio" in sys.argv:
        cells.append(f"{medians[0] / medians[1]:.2f}")
    print(f"| median | {b} | " + " | ".join(cells) + " |")
