"""The workloads' client: runs transactions against a SQL database and
records them as histories for hvsim's checkers (docs/checkers.md).

The client service starts it before setup complete: it makes the tables,
opens its connections, reports setup complete, and serves the template's
drivers on 127.0.0.1:7000, one request a line, its first word the
driver's pid (the history's process), the answer ok, fail (refused: it
did not happen), info (unknown: it may have) or unavailable (no
connection to the database: not run):

    PID txn r x r y append x 123    a list-append transaction (accounts/)
    PID transfer a b 5              move money between accounts (../postgres-bank)
    PID read                        every balance at once (../postgres-bank)

as Jepsen's clients run in one program with a connection per worker. The
costly part (Python and the database driver loaded, connections made)
is then in the root snapshot, paid once per exploration rather than once
per driver: a driver is a few lines of bash.

Lists are rows of `lists(k, v)`, v the elements joined by commas; an
append inserts the row or adds to it in one statement. Accounts are rows
of `accounts(id, balance)`, opened at setup when `BANK=1` (the ledger's
`open`, history `bank`; other workloads record no ledger). Which database (`DB`: postgres or mariadb) and what isolation
level (`ISOLATION`: "repeatable read", "serializable"...) come from the
environment, so the workloads run against both.
"""

import json
import os
import queue
import random
import socketserver
import sys
import time

DB = os.environ.get("DB", "postgres")
ISOLATION = os.environ.get("ISOLATION", "serializable").upper()
BANK = os.environ.get("BANK") == "1"
# As many as drivers run at once (the composer starts at most four).
CONNECTIONS = 4
ACCOUNTS = {name: 20 for name in "abcde"}
TABLES = [
    "CREATE TABLE IF NOT EXISTS lists (k VARCHAR(16) PRIMARY KEY, v TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS accounts (id VARCHAR(16) PRIMARY KEY, balance INT NOT NULL)",
]

if DB == "postgres":
    import psycopg2 as driver

    APPEND = (
        "INSERT INTO lists (k, v) VALUES (%s, %s) "
        "ON CONFLICT (k) DO UPDATE SET v = lists.v || ',' || EXCLUDED.v"
    )
    BEGIN = ["START TRANSACTION ISOLATION LEVEL " + ISOLATION]
    # A serialization failure, a deadlock: the database refused the
    # transaction, it did not happen.
    REFUSED = ("40001", "40P01")
elif DB == "mariadb":
    import pymysql as driver

    APPEND = (
        "INSERT INTO lists (k, v) VALUES (%s, %s) "
        "ON DUPLICATE KEY UPDATE v = CONCAT(v, ',', VALUES(v))"
    )
    BEGIN = ["SET TRANSACTION ISOLATION LEVEL " + ISOLATION, "START TRANSACTION"]
    # ER_LOCK_DEADLOCK, ER_LOCK_WAIT_TIMEOUT: rolled back.
    REFUSED = (1213, 1205)
else:
    sys.exit(f"DB={DB!r}: expected postgres or mariadb")


def connect():
    if DB == "postgres":
        # The server ends a statement that waits more than 5 s for a lock;
        # TCP gives up on a server that stopped answering after 10 s.
        conn = driver.connect(host="store", user="postgres", dbname="postgres", connect_timeout=5,
                              options="-c statement_timeout=5000", tcp_user_timeout=10000,
                              keepalives_idle=5, keepalives_interval=1, keepalives_count=5)
        conn.autocommit = True
        return conn
    conn = driver.connect(host="store", user="root", connect_timeout=5, read_timeout=10,
                          write_timeout=10, autocommit=True)
    with conn.cursor() as c:
        c.execute("CREATE DATABASE IF NOT EXISTS hvsim")
    conn.select_db("hvsim")
    return conn


def connect_when_up():
    """The first connection, made while the database may still be
    starting: retried for a minute."""
    for _ in range(120):
        try:
            return connect()
        except driver.OperationalError:
            time.sleep(0.5)
    return connect()


def refused(e):
    code = getattr(e, "pgcode", None) if DB == "postgres" else (e.args[0] if e.args else None)
    return code in REFUSED


def sdk(event):
    with open(os.environ["HVSIM_SDK_OUTPUT"], "a") as f:
        f.write(json.dumps(event, separators=(",", ":")) + "\n")


def think():
    """Up to 50 ms between one statement and the next, as an application
    computes what to write from what it read."""
    time.sleep(random.random() / 20)


class Insufficient(Exception):
    """A transfer the source account cannot pay: refused, not made."""


def transaction(conn, body):
    """`body(cursor)` as one transaction at ISOLATION; what it returned."""
    with conn.cursor() as c:
        for sql in BEGIN:
            c.execute(sql)
        try:
            value = body(c)
        except Insufficient:
            c.execute("ROLLBACK")
            raise
        think()
        c.execute("COMMIT")
    return value


def list_append(ops):
    """The micro-operations (f, key, value) as a transaction's body: the
    same, reads filled in."""
    def body(c):
        done = []
        for f, k, v in ops:
            think()
            if f == "append":
                c.execute(APPEND, (k, str(v)))
                done.append([f, k, v])
            else:
                c.execute("SELECT v FROM lists WHERE k = %s", (k,))
                row = c.fetchone()
                done.append([f, k, [int(e) for e in row[0].split(",")] if row else []])
        return done
    return body


def transfer(source, dest, amount):
    def body(c):
        c.execute("SELECT balance FROM accounts WHERE id = %s", (source,))
        (balance,) = c.fetchone()
        if balance < amount:
            raise Insufficient()
        think()
        c.execute("UPDATE accounts SET balance = balance - %s WHERE id = %s", (amount, source))
        c.execute("UPDATE accounts SET balance = balance + %s WHERE id = %s", (amount, dest))
        return {"from": source, "to": dest, "amount": amount}
    return body


def read_balances(c):
    c.execute("SELECT id, balance FROM accounts")
    return dict(c.fetchall())


class Pool:
    """The connections, one per driver running at once; a broken one is
    replaced when next needed."""

    def __init__(self):
        self.idle = queue.Queue()
        first = connect_when_up()
        with first.cursor() as c:
            for sql in TABLES:
                c.execute(sql)
            c.execute("SELECT count(*) FROM accounts")
            opened = c.fetchone()[0] > 0
        if BANK and not opened:
            history(0, "bank", "invoke", "open", ACCOUNTS)
            transaction(first, lambda c: c.executemany(
                "INSERT INTO accounts (id, balance) VALUES (%s, %s)", list(ACCOUNTS.items())))
            history(0, "bank", "ok", "open", ACCOUNTS)
        self.idle.put(first)
        for _ in range(CONNECTIONS - 1):
            self.idle.put(connect())

    def run(self, process, name, f, asked, body):
        """Runs `body` as one transaction on an idle connection and records
        it (invoke `asked`, then ok with what the body returned, fail or
        info with `asked`) in history `name`; what became of it."""
        conn = self.idle.get()
        if conn is None:
            try:
                conn = connect()
            except driver.Error:
                self.idle.put(None)
                return "unavailable"
        history(process, name, "invoke", f, asked)
        try:
            done = transaction(conn, body)
        except Insufficient:
            self.idle.put(conn)
            history(process, name, "fail", f, asked)
            return "fail"
        except driver.Error as e:
            if refused(e):
                try:
                    with conn.cursor() as c:
                        c.execute("ROLLBACK")
                    self.idle.put(conn)
                except driver.Error:
                    self.idle.put(None)
                history(process, name, "fail", f, asked)
                return "fail"
            # No answer, or a broken connection: it may or may not have
            # taken effect. A new connection replaces this one.
            history(process, name, "info", f, asked)
            try:
                conn.close()
            except driver.Error:
                pass
            self.idle.put(None)
            return "info"
        self.idle.put(conn)
        history(process, name, "ok", f, done)
        return "ok"


def history(process, name, kind, f, value):
    event = {"process": process, "type": kind, "f": f, "value": value}
    if name:
        event["history"] = name
    sdk({"hvsim_history": event})


def parse_ops(words):
    """`r KEY` and `append KEY ELEMENT`, as (f, key, value) triples."""
    ops = []
    while words:
        if words[0] == "r" and len(words) >= 2:
            ops.append(("r", words[1], None))
            words = words[2:]
        elif words[0] == "append" and len(words) >= 3:
            ops.append(("append", words[1], int(words[2])))
            words = words[3:]
        else:
            raise ValueError(f"not a micro-operation: {' '.join(words)}")
    return ops


def serve(words):
    process, request, args = int(words[0]), words[1], words[2:]
    if request == "txn":
        ops = parse_ops(args)
        return POOL.run(process, None, "txn", [list(op) for op in ops], list_append(ops))
    if request == "transfer" and len(args) == 3:
        source, dest, amount = args[0], args[1], int(args[2])
        asked = {"from": source, "to": dest, "amount": amount}
        return POOL.run(process, "bank", "transfer", asked, transfer(source, dest, amount))
    if request == "read" and not args:
        return POOL.run(process, "bank", "read", None, read_balances)
    raise ValueError(f"not a request: {' '.join(words)}")


class Driver(socketserver.StreamRequestHandler):
    """One driver's connection: its requests, one at a time."""

    def handle(self):
        for line in self.rfile:
            try:
                answer = serve(line.decode().split())
            except (ValueError, IndexError) as e:
                answer = f"error {e}"
            self.wfile.write((answer + "\n").encode())


if __name__ == "__main__":
    POOL = Pool()
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 7000), Driver)
    server.daemon_threads = True
    sdk({"antithesis_setup": {"status": "complete", "details": None}})
    server.serve_forever()
