#!/usr/bin/env python3
"""The WAL of a benchmark window, by record kind and relation, per message.

    scripts/wal-breakdown.py RESULTS_JSON PGDATA DB_URL [SCENARIO ...]
    scripts/wal-breakdown.py --range START END MESSAGES PGDATA DB_URL

The first form reads the windows of a lanes-bench run (results.json: each
result's walStartLsn, walEndLsn and messages) and breaks down each one, or
only the scenarios named; the second one LSN range. PGDATA is the cluster's
data directory (lanes-bench's is <-pg-dir>/data) and must still hold the
range's WAL segments: raise wal_keep_size (ALTER SYSTEM) before the run, or
checkpoints recycle them. DB_URL is the broker's database, whose relfilenodes
name the relations (lanes_bench for the harness). pg_waldump is looked up
under /usr/lib/postgresql/*/bin, then on PATH.

Every record's length is summed by (resource manager, record type, the
relation of its first block); full-page images are listed apart, by
relation. Totals match pg_waldump --stats=record over the same range.
"""

import collections
import glob
import json
import re
import shutil
import subprocess
import sys

RELATIONS_SQL = (
    "SELECT pg_relation_filenode(c.oid), n.nspname || '.' || c.relname FROM pg_class c"
    " JOIN pg_namespace n ON n.oid = c.relnamespace WHERE pg_relation_filenode(c.oid) IS NOT NULL"
)
RECORD = re.compile(
    r"rmgr: (\S+)\s+len \(rec/tot\):\s+(\d+)/\s*(\d+), tx:\s+\d+, "
    r"lsn: \S+, prev \S+, desc: (\S+)(.*)"
)
BLOCK = re.compile(r"rel \d+/\d+/(\d+)(?: fork \w+)? blk \d+( FPW)?")


def waldump() -> str:
    found = sorted(
        glob.glob("/usr/lib/postgresql/*/bin/pg_waldump"), key=lambda p: int(p.split("/")[4])
    )
    path = found[-1] if found else shutil.which("pg_waldump")
    if not path:
        sys.exit("wal-breakdown: pg_waldump not found")
    return path


def relation_names(db_url: str) -> dict[str, str]:
    out = subprocess.run(
        ["psql", db_url, "-tAF|", "-c", RELATIONS_SQL], capture_output=True, text=True, check=True
    ).stdout
    return dict(line.split("|", 1) for line in out.splitlines() if "|" in line)


def breakdown(start: str, end: str, messages: int, pgdata: str, names: dict[str, str]) -> None:
    dump = subprocess.run(
        [waldump(), "-p", pgdata + "/pg_wal", "-s", start, "-e", end],
        capture_output=True,
        text=True,
        check=False,
    )
    Key = tuple[str, str, str]  # resource manager, record type, relation
    size: collections.Counter[Key] = collections.Counter()
    count: collections.Counter[Key] = collections.Counter()
    fpi_size: dict[str, float] = collections.defaultdict(float)
    fpi_count: collections.Counter[str] = collections.Counter()
    total = commits = 0
    for line in dump.stdout.splitlines():
        m = RECORD.match(line)
        if not m:
            continue
        rmgr, rec_len, tot_len, kind, rest = (
            m.group(1),
            int(m.group(2)),
            int(m.group(3)),
            m.group(4),
            m.group(5),
        )
        total += tot_len
        commits += rmgr == "Transaction" and kind == "COMMIT"
        blocks = BLOCK.findall(rest)
        key = (rmgr, kind, names.get(blocks[0][0], "filenode " + blocks[0][0]) if blocks else "-")
        size[key] += rec_len
        count[key] += 1
        images = [b[0] for b in blocks if b[1]]
        for node in images:  # a record's images share its bytes beyond the record proper
            name = names.get(node, "filenode " + node)
            fpi_count[name] += 1
            fpi_size[name] += (tot_len - rec_len) / len(images)
    if dump.returncode != 0 and total == 0:
        sys.exit("wal-breakdown: " + dump.stderr.strip())
    per = max(messages, 1)
    print(
        f"{start} → {end}: {total} bytes, {messages} messages, {commits} commits: "
        f"{total / per:.1f} bytes/msg, {messages / max(commits, 1):.1f} msg/commit"
    )
    print(f"  {'rmgr':11} {'record':12} {'relation':40} {'per msg':>8} {'B/msg':>7} {'share':>6}")
    for key, b in sorted(size.items(), key=lambda kv: -kv[1]):
        if b >= total / 200:  # half a percent and more
            rmgr, kind, rel = key
            n, share = count[key] / per, 100 * b / total
            print(f"  {rmgr:11} {kind:12} {rel[:40]:40} {n:8.3f} {b / per:7.1f} {share:5.1f}%")
    fpi_total = sum(fpi_size.values())
    share = 100 * fpi_total / max(total, 1)
    print(
        f"  full-page images: {sum(fpi_count.values())}, {fpi_total / per:.1f} B/msg, {share:.1f}%"
    )
    for name, image_bytes in sorted(fpi_size.items(), key=lambda kv: -kv[1])[:8]:
        print(f"    {name[:48]:48} {fpi_count[name]:6d} {image_bytes / per:7.1f} B/msg")


def main(argv: list[str]) -> None:
    if len(argv) >= 6 and argv[0] == "--range":
        start, end, messages, pgdata, db_url = argv[1:6]
        breakdown(start, end, int(messages), pgdata, relation_names(db_url))
        return
    if len(argv) < 3:
        sys.exit(__doc__)
    results, pgdata, db_url, wanted = argv[0], argv[1], argv[2], set(argv[3:])
    names = relation_names(db_url)
    with open(results) as f:
        run = json.load(f)
    for r in run["results"]:
        if r.get("walStartLsn") and (not wanted or r["scenario"] in wanted):
            print(f"== {r['scenario']} ({r['msgPerSec']:.0f} msg/s)")
            breakdown(r["walStartLsn"], r["walEndLsn"], r["messages"], pgdata, names)


if __name__ == "__main__":
    main(sys.argv[1:])
