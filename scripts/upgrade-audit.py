#!/usr/bin/env python3
"""scripts/upgrade-audit.py — upgrade databases written by real old brokers; check nothing is lost.

    scripts/upgrade-audit.py [--old COMMIT ...] [--scenario NAME ...] [--new-bin PATH]
                             [--ports OLD NEW]

For each old commit (default: three whose schemas differ) it builds that broker
(`git worktree add` + `go build`, cached in .lanes/upgrade-audit/), and for each scenario runs it
on a fresh database of the local cluster (scripts/pg.sh; LANES_PG_* apply):

  sigterm    the old broker writes what a user has (pending messages in several partitions, a group
             mid-way with a live lease, dead letters, KV keys with and without TTL, timers, dedup
             ids, retention settings), stops on SIGTERM, and the current broker starts on the same
             database: every pending message is delivered once, nothing acked comes back, the lease
             is honoured until it expires, then redelivers; dedup, DLQ, KV, timers, retention and
             the listing routes answer as before.
  kill9      the same with the old broker killed (SIGKILL) in the middle of push/pop/ack traffic:
             every push it answered `queued` is delivered (retried pushes are deduplicated), no
             acked message comes back.
  mixed      old and current broker at once on one database (a rolling upgrade) with traffic
             through both; then the old broker restarts beside the newer schema.
  spool      the old broker buffers pushes to its disk spool (push maintenance on) and is killed;
             the current broker, started on the same spool directory, drains them once.
  downgrade  the current broker runs, stops, and the old one starts again on its database.

Each of sigterm, kill9, mixed and downgrade ends with the current broker's group listings, paged
by key, checked against every cursor the database holds, the old brokers' included (schema 180
gave cursors a queue_id that older brokers do not write). The old brokers listen on one port and
the current ones on another (--ports, default 7471 7472).

Exit status 0 when every check held; each failed check prints "FAIL". Needs Go, git history
and PostgreSQL's client (through scripts/pg.sh). Takes about a minute per (commit, scenario).
"""

import argparse
import base64
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STATE = os.path.join(REPO, ".lanes", "upgrade-audit")
# Schemas 170, 120, 110 and 060 (the first with a recorded digest). 170 is the one broker from
# 140 on: it applies nothing under a newer recorded version and checks the minimum broker version
# at its boot, where the three older ones apply their own files again.
DEFAULT_OLD = ["df59b50", "0c78c46", "9d90dfd", "347c301"]
LEASE_HELD_SECONDS = 12
# The old brokers listen on the first, the current ones on the second (--ports): a scenario runs at
# most one of each at a time, and every broker stops when its scenario ends.
PORTS = {"old": 7471, "new": 7472}

failures = []
BROKERS = []  # every broker started, stopped when its scenario ends


def check(ok, what):
    print(("  ok   " if ok else "  FAIL ") + what, flush=True)
    if not ok:
        failures.append(what)
    return ok


# --- builds, database, brokers ----------------------------------------------------------------


def build_old(commit):
    os.makedirs(STATE, exist_ok=True)
    binary = os.path.join(STATE, "lanes-" + commit)
    if os.path.exists(binary):
        return binary
    tree = os.path.join(STATE, "tree-" + commit)
    subprocess.run(
        ["git", "-C", REPO, "worktree", "add", "--detach", tree, commit],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    try:
        subprocess.run(["go", "build", "-o", binary, "./server/cmd/lanes"], cwd=tree, check=True)
    finally:
        subprocess.run(["git", "-C", REPO, "worktree", "remove", "--force", tree], check=True)
    return binary


def build_new():
    os.makedirs(STATE, exist_ok=True)
    binary = os.path.join(STATE, "lanes-current")
    subprocess.run(["go", "build", "-o", binary, "./server/cmd/lanes"], cwd=REPO, check=True)
    return binary


def psql(db, sql):
    out = subprocess.run(
        [os.path.join(REPO, "scripts", "pg.sh"), "psql", "-d", db, "-XAtqc", sql],
        check=True,
        capture_output=True,
        text=True,
    )
    return out.stdout.strip()


def fresh_database(name):
    psql("postgres", f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
    psql("postgres", f"CREATE DATABASE {name}")
    url = subprocess.run(
        [os.path.join(REPO, "scripts", "pg.sh"), "url"], check=True, capture_output=True, text=True
    ).stdout.strip()
    parts = urllib.parse.urlsplit(url)
    return parts._replace(path="/" + name).geturl()


class Broker:
    def __init__(self, binary, db_url, port, name, **env):
        self.binary, self.port, self.name = binary, port, name
        self.url = f"http://127.0.0.1:{port}"
        self.log_path = os.path.join(STATE, f"{name}.log")
        spool = os.path.join(STATE, f"spool-{name}")
        subprocess.run(["rm", "-rf", spool], check=True)
        self.env = dict(
            os.environ,
            LANES_DATABASE_URL=db_url,
            LANES_PORT=str(port),
            LANES_BIND_ADDR="127.0.0.1",
            LANES_SPOOL_DIR=spool,
            LANES_LOG_LEVEL="info",
            **{k: str(v) for k, v in env.items()},
        )
        self.proc = None
        BROKERS.append(self)

    def start(self, expect_ready=True):
        with open(self.log_path, "a") as log:
            log.write(f"--- start {self.binary}\n")
            log.flush()
            self.proc = subprocess.Popen(
                [self.binary], env=self.env, stdout=log, stderr=subprocess.STDOUT
            )
        deadline = time.time() + 30
        while time.time() < deadline:
            if self.proc.poll() is not None:
                if expect_ready:
                    raise RuntimeError(
                        f"{self.name} exited with {self.proc.returncode}: see {self.log_path}"
                    )
                return False
            try:
                if http("GET", self.url + "/health", timeout=1)[0] == 200:
                    return True
            except OSError:
                pass
            time.sleep(0.2)
        if expect_ready:
            raise RuntimeError(f"{self.name} not healthy in 30 s: see {self.log_path}")
        return False

    def stop(self, sig=signal.SIGTERM):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def log_text(self):
        with open(self.log_path) as f:
            return f.read()


def http(method, url, body=None, timeout=35):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(
        url, data=data, method=method, headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            raw = resp.read()
            return resp.status, (json.loads(raw) if raw else None)
    except urllib.error.HTTPError as e:
        raw = e.read()
        try:
            return e.code, json.loads(raw)
        except ValueError:
            return e.code, raw.decode(errors="replace")


class Client:
    def __init__(self, broker):
        self.base = broker.url

    def call(self, method, path, body=None, want=(200, 201, 204)):
        status, answer = http(method, self.base + path, body)
        if status not in want:
            raise RuntimeError(f"{method} {path}: {status} {answer}")
        return answer

    def push(self, items):
        return self.call("POST", "/api/v1/push", {"items": items})

    def pop(self, queue, group=None, partition=None, **params):
        path = f"/api/v1/pop/queue/{queue}" + (f"/partition/{partition}" if partition else "")
        if group:
            params["consumerGroup"] = group
        answer = self.call("GET", path + "?" + urllib.parse.urlencode(params))
        return answer or {"messages": [], "leaseId": ""}

    def ack(self, group, messages, lease, status="completed"):
        items = [
            {
                "transactionId": m["transactionId"],
                "partitionId": m["partitionId"],
                "status": status,
                "leaseId": lease,
            }
            for m in messages
        ]
        return self.call(
            "POST", "/api/v1/ack/batch", {"consumerGroup": group, "acknowledgments": items}
        )


def q(s):
    return urllib.parse.quote(s, safe="")


# --- the state a user has ---------------------------------------------------------------------

ORDERS, POISON, RETAINED, EXPIRING, TIMED, TRAFFIC = (
    "up.orders",
    "up.poison",
    "up.retained",
    "up.expiring",
    "up.timed",
    "up.traffic",
)
GROUP = "billing"


def create_state(c):
    """Writes through the old broker what a user would have; returns what it expects to find."""
    want = {}
    c.call(
        "POST",
        "/api/v1/configure",
        {"queue": ORDERS, "options": {"leaseTime": 60, "dedupWindowSeconds": 3600}},
    )
    retained = {
        "retentionEnabled": True,
        "retentionSeconds": 86400,
        "completedRetentionSeconds": 3600,
        "dedupWindowSeconds": 7200,
        "retryLimit": 5,
        "leaseTime": 45,
    }
    c.call("POST", "/api/v1/configure", {"queue": RETAINED, "options": retained})
    c.call(
        "POST",
        "/api/v1/configure",
        {"queue": EXPIRING, "options": {"retentionEnabled": True, "retentionSeconds": 4}},
    )
    c.call("POST", "/api/v1/configure", {"queue": POISON, "options": {"retryLimit": 1}})
    want["retained_options"] = retained

    # The group subscribes from the start, then 10 messages in each of 3 partitions.
    c.pop(ORDERS, GROUP, subscriptionMode="all", batch=1, leaseSeconds=1)  # first contact (204)
    items = [
        {
            "queue": ORDERS,
            "partition": f"p{p}",
            "transactionId": f"o-{p}-{i}",
            "payload": {"p": p, "i": i},
        }
        for p in range(3)
        for i in range(10)
    ]
    pushed = c.push(items)
    check(
        all(r["status"] == "queued" for r in pushed),
        "old broker queued 30 messages in 3 partitions",
    )
    want["message_ids"] = {r["transaction_id"]: r["message_id"] for r in pushed}
    # Cursor moved: p0's first 5 acked.
    got = c.pop(ORDERS, GROUP, partition="p0", batch=5, leaseSeconds=60)
    check(
        [m["transactionId"] for m in got["messages"]] == [f"o-0-{i}" for i in range(5)],
        "old broker popped p0 0-4",
    )
    acked = c.ack(GROUP, got["messages"], got["leaseId"])
    check(all(a["success"] for a in acked), "old broker acked p0 0-4")
    # A live lease on p1's first 4, not acked.
    got = c.pop(ORDERS, GROUP, partition="p1", batch=4, leaseSeconds=LEASE_HELD_SECONDS)
    check(
        [m["transactionId"] for m in got["messages"]] == [f"o-1-{i}" for i in range(4)],
        "old broker leased p1 0-3",
    )
    want["held_lease"] = (got["leaseId"], got["messages"], time.time() + LEASE_HELD_SECONDS)
    want["acked"] = {f"o-0-{i}" for i in range(5)}

    # Dead letters: two filed by an explicit dlq ack, one by a spent retry budget.
    c.push(
        [
            {
                "queue": POISON,
                "partition": "x",
                "transactionId": f"bad-{i}",
                "payload": {"bad": i, "text": 'ü"q'},
            }
            for i in range(3)
        ]
    )
    got = c.pop(POISON, GROUP, subscriptionMode="all", batch=2, leaseSeconds=60)
    c.ack(GROUP, got["messages"], got["leaseId"], status="dlq")
    for _ in range(5):  # failed until the retry budget is spent
        got = c.pop(POISON, GROUP, batch=1, leaseSeconds=60)
        if not got["messages"]:
            break
        c.ack(GROUP, got["messages"], got["leaseId"], status="failed")
    dlq = c.call("GET", f"/api/v1/dlq?queue={POISON}")
    check(
        len(dlq["messages"]) == 3, f"old broker filed 3 dead letters (has {len(dlq['messages'])})"
    )
    want["dlq"] = sorted(
        (d["transactionId"], json.dumps(d["data"], sort_keys=True), d["consumerGroup"])
        for d in dlq["messages"]
    )

    # KV: forever, a long TTL, and one that expires during the upgrade.
    ops = [
        {"op": "put", "ns": "up", "key": "forever", "value": {"a": [1, 2]}, "forever": True},
        {"op": "put", "ns": "up", "key": "long", "value": "kept", "ttlSeconds": 3600},
        {"op": "put", "ns": "up", "key": "short", "value": 1, "ttlSeconds": 2},
        {"op": "incr", "ns": "up", "key": "counter", "delta": 7, "forever": True},
    ]
    c.call("POST", "/api/v1/kv", {"operations": ops})
    want["kv"] = {k: c.call("GET", f"/api/v1/kv/up/{k}") for k in ("forever", "long", "counter")}

    # Timers: one fired already, one far away, one due just after the upgrade.
    def timer(key, delay_ms, value):
        return {
            "op": "schedule",
            "queue": TIMED,
            "timerKey": key,
            "delayMs": delay_ms,
            "txn": "tm-" + key,
            "payload": base64.b64encode(json.dumps(value).encode()).decode(),
        }

    c.call(
        "POST",
        "/api/v1/timers",
        {
            "operations": [
                timer("fired", 0, {"t": "fired"}),
                timer("later", 3_600_000, {"t": "later"}),
            ]
        },
    )
    deadline = time.time() + 10
    while time.time() < deadline and c.call("GET", f"/api/v1/timers/{TIMED}/fired").get("found"):
        time.sleep(0.1)
    got = c.pop(TIMED, "timers", subscriptionMode="all", batch=10, autoAck="true")
    check(
        [m["transactionId"] for m in got["messages"]] == ["tm-fired"],
        "old broker fired a due timer once",
    )
    want["timer_later"] = c.call("GET", f"/api/v1/timers/{TIMED}/later")

    # Retention: messages that expire, the sweep runs on the new broker.
    c.push([{"queue": EXPIRING, "transactionId": f"e-{i}", "payload": i} for i in range(5)])
    want["timer_soon"] = lambda: c.call(
        "POST", "/api/v1/timers", {"operations": [timer("soon", 3000, {"t": "soon"})]}
    )
    return want


def listings(queue):
    return [
        "/api/v1/resources/queues",
        "/api/v1/resources/overview",
        "/api/v1/resources/namespaces",
        "/api/v1/resources/tasks",
        f"/api/v1/resources/queues/{queue}",
        f"/api/v1/resources/queues/{queue}/depth",
        f"/api/v1/messages?queue={queue}",
        f"/api/v1/dlq?queue={POISON}",
        "/api/v1/consumer-groups",
        f"/api/v1/consumer-groups/{GROUP}",
        "/api/v1/consumer-groups/lagging",
        "/api/v1/resources/kv/namespaces",
        f"/api/v1/timers/{TIMED}",
        "/api/v1/status",
        "/api/v1/status/queues",
        f"/api/v1/status/queues/{queue}",
        "/api/v1/status/buffers",
        "/api/v1/system/maintenance",
        "/metrics",
        "/status",
    ]


def check_listings(c, who, queue=ORDERS):
    bad = []
    for path in listings(queue):
        status, answer = http("GET", c.base + path)
        if status != 200:
            bad.append(f"{path} {status} {str(answer)[:120]}")
    check(
        not bad,
        f"{who}: every listing route answers 200" + ("" if not bad else ": " + "; ".join(bad)),
    )


# Every cursor's group, queue and partition, with its offset lag, and every registration (a group
# with a stored subscription on a queue, listed even without cursors), read through the partitions
# (not through consumers.queue_id, which schema 180 added and older brokers never write).
CURSORS_SQL = """SELECT jsonb_build_object(
    'cursors', (SELECT coalesce(jsonb_agg(jsonb_build_array(c.consumer_group, q.name, p.name,
            greatest(p.last_offset - greatest(c.committed, p.log_start - 1), 0))), '[]')
        FROM lanes.consumers c JOIN lanes.partitions p ON p.id = c.partition_id
        JOIN lanes.queues q ON q.id = p.queue_id),
    'registrations', (SELECT coalesce(jsonb_agg(jsonb_build_array(g.consumer_group, q.name)), '[]')
        FROM lanes.consumer_groups g JOIN lanes.queues q ON q.id = g.queue_id))"""


def http_page(url):
    """A GET's status, body and the next page's `after` (None when the page is the last)."""
    try:
        with urllib.request.urlopen(url, timeout=35) as resp:
            more = resp.headers.get("X-Lanes-Truncated") == "true"
            return (
                resp.status,
                json.loads(resp.read()),
                (resp.headers.get("X-Lanes-Next-After") if more else None),
            )
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(errors="replace"), None


def pages_by_key(c, path, limit=2, **params):
    """Every page of a keyed listing, asked for by `after` (two rows a page, so the keys of every
    kind of row are followed); a failed page raises."""
    pages, after = [], None
    while True:
        query = dict(params, limit=limit, **({"after": after} if after else {}))
        status, answer, after = http_page(c.base + path + "?" + urllib.parse.urlencode(query))
        if status != 200:
            raise RuntimeError(f"GET {path} {query}: {status} {str(answer)[:200]}")
        pages.append(answer)
        if after is None or len(pages) > 1000:
            return pages


def group_listings(c):
    """The three group listings, paged by key, as rows comparable with the database's."""
    summaries = [
        (g["name"], g["queueName"], g["partitionCursors"], g["partitionsWithLag"], g["totalLag"])
        for page in pages_by_key(c, "/api/v1/consumer-groups")
        for g in page
    ]
    details = {}
    for group in dict.fromkeys(s[0] for s in summaries):
        details[group] = [
            (queue, cursor["partition"], cursor["offsetLag"])
            for page in pages_by_key(c, "/api/v1/consumer-groups/" + q(group))
            for queue, detail in page.items()
            for cursor in detail["partitions"]
        ]
    lagging = [
        (r["consumer_group"], r["queue_name"], r["partition_name"], r["offset_lag"])
        for page in pages_by_key(c, "/api/v1/consumer-groups/lagging", minLagSeconds=0)
        for r in page
    ]
    return summaries, details, lagging


def expected_group_listings(db):
    state = json.loads(psql(db, CURSORS_SQL))
    cursors = sorted(tuple(r) for r in state["cursors"])
    sums = {tuple(r): [0, 0, 0] for r in state["registrations"]}
    for group, queue, _, lag in cursors:
        total = sums.setdefault((group, queue), [0, 0, 0])
        total[0], total[1], total[2] = total[0] + 1, total[1] + (lag > 0), total[2] + lag
    summaries = sorted(k + tuple(v) for k, v in sums.items())
    details = {
        group: [(queue, partition, lag) for g, queue, partition, lag in cursors if g == group]
        for group in dict.fromkeys(s[0] for s in summaries)
    }
    lagging = [r for r in cursors if r[3] > 0]
    return summaries, details, lagging


def check_group_listings(c, db, who):
    """Every cursor carries its partition's queue (schema 180's queue_id, which a trigger fills for
    an older broker's inserts, and the upgrade backfills for cursors written before it), and the
    current broker's group listings (list, each group's detail, lagging), paged by key, show every
    cursor and registration with the totals the database holds. Read twice around the listings, so
    a retention sweep in between asks for another try."""
    wrong = psql(
        db,
        """SELECT count(*) FILTER (WHERE c.queue_id IS DISTINCT FROM p.queue_id) || ' of '
            || count(*) FROM lanes.consumers c JOIN lanes.partitions p ON p.id = c.partition_id""",
    )
    check(
        wrong.startswith("0 of "),
        f"{who}: every cursor carries its partition's queue ({wrong} wrong)",
    )
    for _ in range(5):
        want = expected_group_listings(db)
        got = group_listings(c)
        if expected_group_listings(db) == want:
            break
        time.sleep(0.5)
    names = ("group list", "group details", "lagging list")
    diff = [
        f"{name}: listed {g} where the database has {w}"
        for name, g, w in zip(names, got, want, strict=True)
        if g != w
    ]
    check(
        not diff,
        f"{who}: the group listings, paged by key, list every cursor of {len(want[0])} "
        f"(group, queue) pairs with the database's totals"
        + ("" if not diff else ": " + "; ".join(diff)),
    )


def drain(c, queue, group, seconds, lease=30, **params):
    """Pops and acks until a pop finds nothing after `seconds`; returns the ids, in order."""
    seen = []
    deadline = time.time() + seconds
    while True:
        got = c.pop(queue, group, batch=100, partitions=10, leaseSeconds=lease, **params)
        if got["messages"]:
            seen += [m["transactionId"] for m in got["messages"]]
            c.ack(group, got["messages"], got["leaseId"])
            continue
        if time.time() > deadline:
            return seen
        time.sleep(0.3)


def verify_state(c, want, who):
    # The held lease: p1 is not redelivered while it lives, and its holder can still ack with it.
    lease, leased, expires = want["held_lease"]
    early = drain(c, ORDERS, GROUP, 0)
    expect_early = sorted([f"o-0-{i}" for i in range(5, 10)] + [f"o-2-{i}" for i in range(10)])
    if time.time() < expires - 1:
        check(
            sorted(early) == expect_early,
            f"{who}: before the old lease expires, p0 5-9 and p2 arrive ({sorted(early)})",
        )
        answer = c.ack(GROUP, leased[:2], lease)
        check(
            all(r["success"] for r in answer),
            f"{who}: the old lease acks o-1-0 and o-1-1 ({answer})",
        )
        acked_with_old_lease = {"o-1-0", "o-1-1"}
    else:
        acked_with_old_lease = set()
        print(f"  note {who}: the old lease expired before the check; early pops: {len(early)}")
    time.sleep(max(0, expires - time.time()) + 1.5)
    late = drain(c, ORDERS, GROUP, 1.5)
    every = early + late
    expect = ({want_t for want_t in want["message_ids"]} - want["acked"]) - acked_with_old_lease
    dup = {t for t in every if every.count(t) > 1}
    check(not dup, f"{who}: no message delivered twice to the group ({sorted(dup)})")
    check(
        not (set(every) & want["acked"]), f"{who}: no message acked before the upgrade comes back"
    )
    check(
        set(every) == expect,
        f"{who}: every pending message delivered (missing {sorted(expect - set(every))}, "
        f"extra {sorted(set(every) - expect)})",
    )
    rest = [m["transactionId"] for m in leased[len(acked_with_old_lease) :]]
    check(
        late[: len(rest)] == rest,
        f"{who}: the expired lease redelivers its unacked span {rest} first ({late[:6]})",
    )

    # Dedup still refuses an old transaction id, answering the original message id.
    again = c.push(
        [{"queue": ORDERS, "partition": "p2", "transactionId": "o-2-3", "payload": "again"}]
    )
    check(
        again[0]["status"] == "duplicate"
        and again[0]["message_id"] == want["message_ids"]["o-2-3"],
        f"{who}: a push of an old transaction id is a duplicate of the original ({again[0]})",
    )

    dlq = c.call("GET", f"/api/v1/dlq?queue={POISON}")
    got = sorted(
        (d["transactionId"], json.dumps(d["data"], sort_keys=True), d["consumerGroup"])
        for d in dlq["messages"]
    )
    check(got == want["dlq"], f"{who}: the dead letters are intact ({got})")
    replay = c.call("POST", f"/api/v1/dlq/{dlq['messages'][0]['id']}/replay", {})
    replayed = drain(c, POISON, GROUP, 1)
    check(
        replayed == [replay["replayedAs"]["transaction_id"]],
        f"{who}: a replayed dead letter is delivered ({replay}, {replayed})",
    )

    for key, before in want["kv"].items():
        now = c.call("GET", f"/api/v1/kv/up/{key}")
        fields = (
            "found",
            "value",
            "version",
            "expiresAt",
            "updatedAt",
        )  # older brokers left out a null expiresAt
        diff = {f: (before.get(f), now.get(f)) for f in fields if before.get(f) != now.get(f)}
        check(not diff, f"{who}: KV up/{key} unchanged ({diff or now})")
    status, short = http("GET", c.base + "/api/v1/kv/up/short")
    check(
        status == 404 or (isinstance(short, dict) and not short.get("found", True)),
        f"{who}: the expired KV key is gone ({status} {short})",
    )

    time.sleep(3.5)
    fired = drain(c, TIMED, "timers", 1, autoAck="true")
    check(fired == ["tm-soon"], f"{who}: the timer due after the upgrade fires once ({fired})")
    later = c.call("GET", f"/api/v1/timers/{TIMED}/later")
    diff = {k: (v, later.get(k)) for k, v in want["timer_later"].items() if later.get(k) != v}
    check(not diff, f"{who}: the far timer is unchanged ({diff})")

    options = c.call("GET", f"/api/v1/resources/queues/{RETAINED}")["options"]
    diff = {
        k: (options.get(k), v) for k, v in want["retained_options"].items() if options.get(k) != v
    }
    check(not diff, f"{who}: retention settings intact ({diff})")
    depth_deadline = time.time() + 12
    while time.time() < depth_deadline:
        if not drain(c, EXPIRING, "late-reader", 0, subscriptionMode="all"):
            break
        time.sleep(1)
    left = c.pop(EXPIRING, "late-reader-2", subscriptionMode="all", batch=10, autoAck="true")[
        "messages"
    ]
    check(not left, f"{who}: the retention sweep removed the expired messages ({len(left)} left)")
    check_listings(c, who)


# --- traffic ----------------------------------------------------------------------------------


class Traffic:
    """Pushes unique ids and consumes them as one group through the given brokers, recording what
    each broker answered."""

    def __init__(self, clients, group="traffic"):
        self.clients, self.group = clients, group
        self.queued, self.unsure, self.delivered = set(), set(), []
        self.acked = {}  # transaction id -> when its ack answered success
        self.back, self.ack_failures = [], {}
        self.stop_flag = threading.Event()
        self.lock = threading.Lock()

    def producer(self, k):
        n = 0
        while not self.stop_flag.is_set():
            c = self.clients[n % len(self.clients)]
            ids = [f"t{k}-{n}-{j}" for j in range(5)]
            try:
                answer = c.push(
                    [
                        {
                            "queue": TRAFFIC,
                            "partition": f"tp{j}",
                            "transactionId": t,
                            "payload": {"t": t},
                        }
                        for j, t in enumerate(ids)
                    ]
                )
                with self.lock:
                    self.queued |= {
                        r["transaction_id"] for r in answer if r["status"] in ("queued", "buffered")
                    }
                    self.unsure |= {
                        r["transaction_id"]
                        for r in answer
                        if r["status"] not in ("queued", "buffered", "duplicate")
                    }
            except (OSError, RuntimeError):
                with self.lock:
                    self.unsure |= set(ids)
            n += 1
            time.sleep(0.002)

    def consumer(self, k):
        n = k
        while not self.stop_flag.is_set():
            c = self.clients[n % len(self.clients)]
            ackc = self.clients[(n + 1) % len(self.clients)]  # ack through the other broker
            n += 1
            try:
                asked = time.time()
                got = c.pop(
                    TRAFFIC,
                    self.group,
                    batch=20,
                    partitions=2,
                    leaseSeconds=5,
                    subscriptionMode="all",
                )
                if not got["messages"]:
                    time.sleep(0.05)
                    continue
                ids = [m["transactionId"] for m in got["messages"]]
                with self.lock:
                    self.delivered += ids
                    # Delivered by a pop asked after its ack answered success: acked, yet back.
                    self.back += [t for t in ids if self.acked.get(t, asked) < asked]
                try:
                    answer = ackc.ack(self.group, got["messages"], got["leaseId"])
                except (OSError, RuntimeError) as e:  # the lease expires and they redeliver
                    with self.lock:
                        key = "no answer: " + type(e).__name__
                        self.ack_failures[key] = self.ack_failures.get(key, 0) + len(ids)
                    continue
                answered = time.time()
                with self.lock:
                    for r in answer:
                        if r["success"]:
                            self.acked.setdefault(r["transactionId"], answered)
                        else:
                            self.ack_failures[r["error"]] = self.ack_failures.get(r["error"], 0) + 1
            except (OSError, RuntimeError):
                time.sleep(0.05)

    def start(self):
        self.threads = [
            threading.Thread(target=self.producer, args=(k,), daemon=True) for k in range(2)
        ]
        self.threads += [
            threading.Thread(target=self.consumer, args=(k,), daemon=True) for k in range(2)
        ]
        for t in self.threads:
            t.start()

    def stop(self):
        self.stop_flag.set()
        for t in self.threads:
            t.join(40)

    def settle(self, c, who):
        """Retries every push whose outcome was unknown (same ids: dedup keeps one), drains the
        group once every lease has expired, and checks the deliveries."""
        statuses = {}
        for t in sorted(self.unsure):
            j = t.rsplit("-", 1)[1]
            answer = c.push(
                [{"queue": TRAFFIC, "partition": f"tp{j}", "transactionId": t, "payload": {"t": t}}]
            )
            self.queued.add(t)
            statuses[answer[0]["status"]] = statuses.get(answer[0]["status"], 0) + 1
        check(
            set(statuses) <= {"queued", "duplicate"},
            f"{who}: pushes whose answer was lost, retried: {statuses}",
        )
        time.sleep(6)
        after = drain(c, TRAFFIC, self.group, 1.5, subscriptionMode="all")
        back = sorted(set(self.back) | (set(after) & set(self.acked)))
        check(
            not back,
            f"{who}: none of {len(self.acked)} acked messages comes back ({back[:5]})",
        )
        everything = set(self.delivered) | set(after)
        missing = self.queued - everything
        check(
            not missing,
            f"{who}: all {len(self.queued)} queued delivered (missing {sorted(missing)[:5]})",
        )
        dup_after = {t for t in after if after.count(t) > 1}
        check(not dup_after, f"{who}: the final drain delivers each message once")
        redelivered = len(self.delivered) - len(set(self.delivered))
        print(
            f"  note {who}: {len(self.queued)} queued, {len(self.acked)} acked in traffic, "
            f"{len(after)} in the final drain, {redelivered} redeliveries during traffic "
            f"(failed acks: {self.ack_failures}), {len(self.unsure)} pushes retried"
        )


# --- scenarios ----------------------------------------------------------------------------------


def schema_row(db):
    """The recorded version, and whether the digest is still the one that version recorded
    (a broker older than 130 that applied its files rewrote it)."""
    return psql(
        db,
        """SELECT jsonb_build_object('version', to_jsonb(s) -> 'version',
        'digest_of_that_version', to_jsonb(s) ->> 'version_digest' = digest)
        FROM lanes.schema_applied s""",
    )


def min_broker_row(db):
    """The oldest broker schema version the database admits and who raised it (schema 140 on);
    old brokers never read or write it."""
    return psql(db, "SELECT to_jsonb(m) - 'raised_at' FROM lanes.min_broker_version m")


def scenario_upgrade(old_bin, new_bin, commit, kill):
    name = f"{commit}-{'kill9' if kill else 'sigterm'}"
    who = f"{commit} {'kill -9' if kill else 'SIGTERM'} -> current"
    db = "upgrade_" + name.replace("-", "_")
    url = fresh_database(db)
    old = Broker(old_bin, url, PORTS["old"], "old-" + name, LANES_RETENTION_INTERVAL_MS=86_400_000)
    old.start()
    c = Client(old)
    want = create_state(c)
    traffic = Traffic([c])
    if kill:
        traffic.start()
        time.sleep(3)
    want["timer_soon"]()
    old.stop(signal.SIGKILL if kill else signal.SIGTERM)
    if kill:
        time.sleep(
            0.5
        )  # the traffic meets the dead broker: those pushes are retried after the switch
        traffic.stop()
    print(f"  note {who}: schema before the upgrade {schema_row(db)}")
    new = Broker(new_bin, url, PORTS["new"], "new-" + name, LANES_RETENTION_INTERVAL_MS=500)
    new.start()
    print(f"  note {who}: schema after {schema_row(db)}")
    nc = Client(new)
    verify_state(nc, want, who)
    traffic.clients = [nc]
    traffic.settle(nc, who)
    check_group_listings(nc, db, who)
    new.stop()


def scenario_mixed(old_bin, new_bin, commit):
    who = f"{commit} + current (mixed)"
    db = f"upgrade_{commit}_mixed"
    url = fresh_database(db)
    old = Broker(old_bin, url, PORTS["old"], f"old-{commit}-mixed")
    old.start()
    new = Broker(new_bin, url, PORTS["new"], f"new-{commit}-mixed")
    c_old = Client(old)
    # Some state from the old broker first.
    c_old.push(
        [
            {"queue": TRAFFIC, "partition": f"tp{j}", "transactionId": f"pre-{j}", "payload": j}
            for j in range(5)
        ]
    )
    new.start()
    c_new = Client(new)
    print(f"  note {who}: schema with both {schema_row(db)}")
    traffic = Traffic([c_old, c_new])
    traffic.queued |= {f"pre-{j}" for j in range(5)}
    traffic.start()
    time.sleep(4)
    # The old broker restarts beside the newer schema (a roll that restarts it, or a crash loop).
    old.stop()
    before = schema_row(db)
    minimum = min_broker_row(db)
    old.start()
    print(f"  note {who}: old broker restarted; schema record {before} -> {schema_row(db)}")
    check(
        min_broker_row(db) == minimum,
        f"{who}: the restarted old broker leaves the minimum broker version alone ({minimum})",
    )
    time.sleep(4)
    # Cross-version reads: a message pushed through one is read back unchanged through the other.
    for writer, reader, label in ((c_new, c_old, "new-to-old"), (c_old, c_new, "old-to-new")):
        payload = {"x": label, "n": 1.5, "s": "ü\u2028", "nested": [None, True]}
        writer.push(
            [
                {
                    "queue": "up.cross",
                    "partition": label,
                    "transactionId": "x-" + label,
                    "payload": payload,
                }
            ]
        )
        got = reader.pop(
            "up.cross", "cross", partition=label, subscriptionMode="all", batch=5, autoAck="true"
        )
        check(
            [m["data"] for m in got["messages"]] == [payload],
            f"{who}: {label} reads the payload back ({got['messages']})",
        )
    # A group only the old broker reads: the old broker writes all of its cursors beside schema 180
    # (the trigger fills their queue), and their lag stays for the group listings' check.
    c_old.pop(TRAFFIC, "old-reader", subscriptionMode="all", batch=1, autoAck="true")
    # And one the old broker's seek creates: cursors without a registration, which the listings
    # find through the cursors' queue alone.
    c_old.call(
        "POST",
        f"/api/v1/consumer-groups/old-seeker/queues/{TRAFFIC}/seek",
        {"timestamp": "2000-01-01T00:00:00Z"},
    )
    # Timers scheduled through both fire once between them; KV increments through both add up.
    ops = {c_old: [], c_new: []}
    for i in range(40):
        client = c_old if i % 2 else c_new
        payload = base64.b64encode(json.dumps({"i": i}).encode()).decode()
        ops[client].append(
            {
                "op": "schedule",
                "queue": "up.mixed-timers",
                "timerKey": f"k{i}",
                "delayMs": 500 + 50 * i,
                "txn": f"mt-{i}",
                "payload": payload,
            }
        )
    for client, batch in ops.items():
        client.call("POST", "/api/v1/timers", {"operations": batch})
    for i in range(40):
        client = c_old if i % 2 else c_new
        incr = {"op": "incr", "ns": "up", "key": "mixed", "delta": 1, "forever": True}
        client.call("POST", "/api/v1/kv", {"operations": [incr]})
    time.sleep(4)
    fired = drain(c_new, "up.mixed-timers", "t", 1, subscriptionMode="all", autoAck="true")
    check(
        sorted(fired) == sorted(f"mt-{i}" for i in range(40)),
        f"{who}: 40 timers scheduled through both fire once ({len(fired)} fired, "
        f"{len(set(fired))} distinct)",
    )
    counter = c_old.call("GET", "/api/v1/kv/up/mixed")
    check(counter.get("value") == 40, f"{who}: 40 KV increments through both add up ({counter})")
    check_listings(c_old, who + " old broker", TRAFFIC)
    check_listings(c_new, who + " new broker", TRAFFIC)
    traffic.stop()
    traffic.clients = [c_new]
    old.stop()
    traffic.settle(c_new, who)
    check_group_listings(c_new, db, who)
    new.stop()


def scenario_spool(old_bin, new_bin, commit):
    """Pushes the old broker buffered on disk (push maintenance on) drain through the current
    broker started on the same spool directory."""
    who = f"{commit} spool -> current"
    db = f"upgrade_{commit}_spool"
    url = fresh_database(db)
    spool = os.path.join(STATE, f"spool-shared-{commit}")
    subprocess.run(["rm", "-rf", spool], check=True)
    old = Broker(old_bin, url, PORTS["old"], f"old-{commit}-spool")
    old.env["LANES_SPOOL_DIR"] = spool
    old.start()
    c = Client(old)
    c.call("POST", "/api/v1/system/maintenance", {"enabled": True})
    time.sleep(1.5)  # every broker rereads the switch within about a second
    ids = [f"s-{i}" for i in range(20)]
    answer = c.push(
        [
            {
                "queue": "up.spooled",
                "partition": f"sp{i % 2}",
                "transactionId": t,
                "payload": {"i": i},
            }
            for i, t in enumerate(ids)
        ]
    )
    check(
        all(r["status"] == "buffered" for r in answer), f"{who}: the old broker buffered 20 pushes"
    )
    old.stop(signal.SIGKILL)  # its active spool file is left unfinished
    new = Broker(new_bin, url, PORTS["new"], f"new-{commit}-spool")
    new.env["LANES_SPOOL_DIR"] = spool
    new.start()
    nc = Client(new)
    nc.call("POST", "/api/v1/system/maintenance", {"enabled": False})
    got = drain(nc, "up.spooled", "spooled", 6, subscriptionMode="all")
    check(
        sorted(got) == sorted(ids),
        f"{who}: the current broker drains the old spool once ({len(got)} of 20)",
    )
    new.stop()


def scenario_downgrade(old_bin, new_bin, commit):
    who = f"current -> {commit} (downgrade)"
    db = f"upgrade_{commit}_downgrade"
    url = fresh_database(db)
    new = Broker(new_bin, url, PORTS["new"], f"new-{commit}-down")
    new.start()
    c = Client(new)
    want = create_state(c)
    want["timer_soon"]()
    new.stop()
    old = Broker(old_bin, url, PORTS["old"], f"old-{commit}-down", LANES_RETENTION_INTERVAL_MS=500)
    before = schema_row(db)
    minimum = min_broker_row(db)
    started = old.start(expect_ready=False)
    log = old.log_text().split("--- start")[-1]
    print(
        f"  note {who}: old broker {'started' if started else 'refused to start'}; "
        f"schema record {before} -> "
        + schema_row(db)
        + "; "
        + " | ".join(line for line in log.splitlines() if "level=ERROR" in line)[:400]
    )
    if not started:
        return
    check(
        min_broker_row(db) == minimum,
        f"{who}: the old broker leaves the minimum broker version alone ({minimum})",
    )
    verify_state(Client(old), want, who)
    old.stop()
    # Upgrading again: the current broker finds its version recorded and applies nothing, so the
    # record the old broker wrote (its digest, its applied_at) stays.
    record = "SELECT to_jsonb(s) FROM lanes.schema_applied s"
    by_old = psql(db, record)
    again = Broker(new_bin, url, PORTS["new"], f"new-{commit}-down")
    again.start()
    check(
        psql(db, record) == by_old, f"{who}: upgrading again applies nothing ({psql(db, record)})"
    )
    c = Client(again)
    c.push([{"queue": ORDERS, "partition": "p9", "transactionId": "again", "payload": 1}])
    check(drain(c, ORDERS, GROUP, 0) == ["again"], f"{who}: upgraded again, a push is delivered")
    check_listings(c, who + " upgraded again")
    check_group_listings(c, db, who + " upgraded again")
    again.stop()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument(
        "--old", nargs="*", default=DEFAULT_OLD, help="old commits (default: %(default)s)"
    )
    ap.add_argument(
        "--old-bin",
        nargs="*",
        default=[],
        help="old broker binaries named lanes-<commit>, instead of building",
    )
    ap.add_argument("--new-bin", help="the current broker (default: built from this checkout)")
    ap.add_argument(
        "--ports",
        nargs=2,
        type=int,
        metavar=("OLD", "NEW"),
        default=[PORTS["old"], PORTS["new"]],
        help="ports of the old and the current brokers (default: %(default)s)",
    )
    ap.add_argument(
        "--scenario", nargs="*", default=["sigterm", "kill9", "mixed", "spool", "downgrade"]
    )
    args = ap.parse_args()
    PORTS["old"], PORTS["new"] = args.ports
    os.makedirs(STATE, exist_ok=True)
    new_bin = args.new_bin or build_new()
    olds = [(os.path.basename(b).removeprefix("lanes-"), b) for b in args.old_bin] or [
        (c, build_old(c)) for c in args.old
    ]
    for commit, old_bin in olds:
        for s in args.scenario:
            print(f"== {commit} {s}", flush=True)
            try:
                if s in ("sigterm", "kill9"):
                    scenario_upgrade(old_bin, new_bin, commit, kill=(s == "kill9"))
                elif s == "mixed":
                    scenario_mixed(old_bin, new_bin, commit)
                elif s == "spool":
                    scenario_spool(old_bin, new_bin, commit)
                elif s == "downgrade":
                    scenario_downgrade(old_bin, new_bin, commit)
            except Exception as e:  # a scenario that breaks is a failure, the others still run
                check(False, f"{commit} {s}: {type(e).__name__}: {e}")
            finally:
                while BROKERS:
                    BROKERS.pop().stop()
    print(
        "\n"
        + (
            "all checks held"
            if not failures
            else f"{len(failures)} checks FAILED:\n  " + "\n  ".join(failures)
        )
    )
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
