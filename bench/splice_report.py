#!/usr/bin/python3
"""Copy the tables of an `actc bench` report into bench/RESULTS.md, between
the markers <!-- bench:NAME begin --> and <!-- bench:NAME end -->, so that
the record's generated rows are the harness's own, never typed by hand.

usage: bench/splice_report.py OUT/report.md NAME [bench/RESULTS.md]

The report's title and plot links are left out (the plots stay in OUT);
its sections are demoted one level to sit under RESULTS.md's heading."""
import re
import sys


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    report, name = sys.argv[1], sys.argv[2]
    results = sys.argv[3] if len(sys.argv) > 3 else "bench/RESULTS.md"
    lines = open(report).read().splitlines()
    body, skip = [], False
    for line in lines:
        if line.startswith("# "):
            continue  # the report's own title
        if line.startswith("## Plots"):
            skip = True
        elif line.startswith("## "):
            skip = False
        if skip:
            continue
        body.append("#" + line if line.startswith("## ") else line)
    text = open(results).read()
    begin, end = f"<!-- bench:{name} begin -->", f"<!-- bench:{name} end -->"
    pattern = re.compile(re.escape(begin) + r".*?" + re.escape(end), re.S)
    if not pattern.search(text):
        sys.exit(f"{results}: no markers {begin} ... {end}")
    block = begin + "\n" + "\n".join(body).strip() + "\n" + end
    open(results, "w").write(pattern.sub(lambda _: block, text))


if __name__ == "__main__":
    main()
