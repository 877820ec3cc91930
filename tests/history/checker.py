"""The checker: a history in, the anomalies it shows out, each as the few
operations that prove it, in words.

How: every transaction gets a fate, COMMITTED or ABORTED, and every fact in the
history is evidence for one of them: a commit the client saw succeed, an abort, a
timeout sweep, a value a reader returned (only a committed winner's value may be
returned), a value a reader passed over without returning it (it read a later
position of the same segment), an ack applied on the subscription's cursor or one
still missing from it. A transaction with evidence for both fates is an anomaly;
which one depends on the pair (a committed write a reader skipped is a lost write,
a returned value of an aborted transaction is an aborted read (Elle's G1a), values
of one transaction returned by one reader and skipped by another are a fractured
read). An ``unknown`` outcome is no evidence at all, so it is accepted exactly when
one of the two fates explains everything else.

A restore of the metastore to an earlier copy (``History.restore``) may lose
decisions clients saw: those become unknown, what readers, consumers and sweeps
observed between the copy and the restore is set aside (it saw a state that is
gone), reader sessions start again at the restore, and replays are compared only
within one era. "Between" is any overlap: an operation invoked before the restore
and answered after it may have decided on the lost state. What must still hold:
nothing of a transaction whose decision was lost is ever delivered afterwards
unless it commits again (fail closed), and everything decided before the copy
stands.

Checked per segment (topic) and per subscription:
  aborted-read (G1a), open-read (returned before any commit of its transaction was
  invoked), losing-writer-read, phantom-read (a value nobody sent), duplicate-read
  (one reader session returns a value twice), fractured-read (atomic visibility:
  all of a committed transaction or none, across segments), lost-write (a
  committed or plain acknowledged write a reader read past without returning it,
  or a final reader never returned), key-order (one producer's values of one key
  returned out of send order), unstable-replay (two readers covering the same range
  returned different values), contradictory-outcome (the client was told both
  committed and aborted), double-ack (a message acknowledged by two committed
  transactions, or plainly while a transaction that then committed held it),
  lost-ack (a committed transaction's ack not on the cursor at the end),
  aborted-ack-applied (an ack applied although its only transaction aborted),
  unacked-gone (a message nobody acked is no longer on the subscription: an ack took
  more than its messages, e.g. a whole batched entry), redelivered-after-commit (a
  consumer session handed out a message after a transaction that acked it was
  reported committed; held to it: a session that acked under a transaction before,
  or that first received after a commit of an ack on its subscription; any other is
  held to pulsar-client's promise only: a copy it pulled before the subscription's
  first claim may come out, and its ack counts as any other under double-ack),
  batch-twice (two
  transactions of one Spark micro-batch committed), duplicate-row (one logical row,
  a micro-batch's or a consume-transform-produce step's output for one input, returned
  twice by one reader: exactly-once end to end), commit-after-failed-send (a
  transaction committed although one of its sends raised before the commit),
  reused-id (a transaction id handed
  out twice: a new transaction, or a micro-batch of another batchId, got it again),
  crossed-reset (after an operator's reset of the metastore, a process of the old
  deployment began, wrote or acked in a transaction, committed, or read or acked a
  transactional entry),
  stale-wire-form (a transactional append in the other property form after an
  operator's wire-format switch reported success: readers of an earlier build skip
  it), secret-shown (an error or a log line shows a secret the history says a setting
  carried).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from .model import FAIL, OK, UNKNOWN, History, Op

COMMITTED, ABORTED = "C", "A"
_INF = (float("inf"),)


@dataclass(frozen=True)
class Anomaly:
    kind: str
    message: str
    ops: tuple[Op, ...]

    def __str__(self) -> str:
        lines = [f"{self.kind}: {self.message}"]
        lines += [f"    {op.describe()}" for op in sorted(set(self.ops), key=lambda o: o.index)]
        return "\n".join(lines)


@dataclass(frozen=True)
class Evidence:
    fate: str  # COMMITTED or ABORTED
    why: str   # commit-ok, commit-failed, abort-ok, swept, read, passed-over, ack-applied,
    #            ack-kept
    ops: tuple[Op, ...]
    text: str


# (why the txn committed, why it aborted) -> the anomaly's name; the first pair found
# in this order is reported (the most definite evidence first)
_PAIRS = [
    (("commit-ok", "abort-ok"), "contradictory-outcome"),
    (("commit-ok", "swept"), "contradictory-outcome"),
    (("commit-ok", "commit-failed"), "contradictory-outcome"),
    (("commit-ok", "passed-over"), "lost-write"),
    (("commit-ok", "ack-kept"), "lost-ack"),
    (("read", "abort-ok"), "aborted-read"),
    (("read", "swept"), "aborted-read"),
    (("read", "commit-failed"), "aborted-read"),
    (("ack-applied", "abort-ok"), "aborted-ack-applied"),
    (("ack-applied", "swept"), "aborted-ack-applied"),
    (("ack-applied", "commit-failed"), "aborted-ack-applied"),
    (("read", "passed-over"), "fractured-read"),
    (("read", "ack-kept"), "lost-ack"),  # its output was read: it committed
    (("ack-applied", "passed-over"), "fractured-read"),
]


@dataclass
class _Session:
    name: str
    topic: str
    start: tuple | None  # exclusive; None = the topic's beginning
    reads: list[Op]
    delivered: list[tuple[tuple, str, Op]]  # (position, value, the read that returned it)
    complete: bool = False  # read to the end of a quiescent topic
    era: int = 0  # restores of the metastore before it began

    @property
    def high(self) -> tuple:
        if self.complete:
            return _INF
        return max((p for p, _, _ in self.delivered), default=self.start or (-1,))


class _Checker:
    def __init__(self, history: History) -> None:
        self.ops = history.ops
        self.anomalies: list[Anomaly] = []
        self.sends: dict[str, Op] = {}
        self.writes: dict[str, list[Op]] = defaultdict(list)
        self.commits: dict[str, list[Op]] = defaultdict(list)
        self.evidence: dict[str, list[Evidence]] = defaultdict(list)
        self.winners: dict[str, set[str] | None] = {}
        self.position: dict[str, tuple] = {}
        for op in self.ops:
            if op.f == "send":
                v = op.args["value"]
                if v in self.sends:
                    raise ValueError(f"value {v} sent twice: values must be unique "
                                     f"({self.sends[v].describe()}; {op.describe()})")
                self.sends[v] = op
                if op.args.get("txn"):
                    self.writes[op.args["txn"]].append(op)
                if op.outcome == OK and op.result.get("position") is not None:
                    self.position[v] = tuple(op.result["position"])
            elif op.f == "commit":
                self.commits[op.args["txn"]].append(op)
                if op.args.get("winners") is not None and op.outcome in (OK, UNKNOWN):
                    self.winners[op.args["txn"]] = set(op.args["winners"])
        for op in self.ops:
            if op.f in ("read", "receive"):
                for p, v in op.result.get("values", ()):
                    self.position.setdefault(v, tuple(p))
        # restores of the metastore: (the copy's clock, the restore's clock)
        self.restores = [(op.args["lost_after"], op.invoked) for op in self.ops
                         if op.f == "fault" and "lost_after" in op.args]
        # transactions whose commit may have been lost: one ran after a copy the
        # metastore was later restored to (an ack it applied on the broker, which no
        # restore rolls back, then proves nothing about its fate)
        self.forgotten = {op.args["txn"] for op in self.ops
                          if op.f == "commit" and self.lost(op)}

    def era(self, op: Op) -> int:
        return sum(1 for _, at in self.restores if at < op.invoked)

    def lost(self, op: Op) -> bool:
        """``op`` may have observed or decided on a state a later restore threw away:
        it ran, for some of its span, between the copy and the restore. Its effect
        happened somewhere in that span: a commit answered after the restore may have
        made its CAS on the store the restore replaced, then spent the outage applying
        its acks (the answer's time alone would call that decision kept)."""
        done = op.completed if op.completed is not None else op.invoked
        return any(op.invoked < at and copy < done for copy, at in self.restores)

    def flag(self, kind: str, message: str, *ops: Op) -> None:
        self.anomalies.append(Anomaly(kind, message, tuple(o for o in ops if o is not None)))

    def prove(self, txn: str, fate: str, why: str, text: str, *ops: Op) -> None:
        self.evidence[txn].append(Evidence(fate, why, ops, text))

    def is_winner(self, send: Op) -> bool | None:
        """Whether the send's writer is one of its txn's winners (None: not known)."""
        w = self.winners.get(send.args["txn"])
        return None if w is None else send.args.get("writer") in w

    # ---- decisions ----
    def decided(self, op: Op) -> bool:
        """A decision the client saw that no later restore of the metastore can have
        lost (the processes' histories are merged after the run, so this is decided
        here, not when the restore was recorded)."""
        return op.outcome == OK and not self.lost(op)

    def decisions(self) -> None:
        for op in self.ops:
            if op.f in ("commit", "abort", "sweep") and self.lost(op):
                continue
            if op.f == "commit" and op.outcome == OK:
                self.prove(op.args["txn"], COMMITTED, "commit-ok", "its commit succeeded", op)
            elif op.f == "commit" and op.outcome == FAIL:
                self.prove(op.args["txn"], ABORTED, "commit-failed",
                           f"its commit failed ({op.result.get('error')})", op)
            elif op.f == "abort" and op.outcome == OK:
                self.prove(op.args["txn"], ABORTED, "abort-ok", "its abort succeeded", op)
            elif op.f == "sweep" and op.outcome == OK and not self.lost(op):
                for t in op.result.get("aborted", ()):
                    self.prove(t, ABORTED, "swept", "the timeout sweep aborted it", op)

    # ---- reads ----
    def sessions(self) -> list[_Session]:
        out: dict[tuple[str, int], _Session] = {}
        last: dict[str, tuple | None] = {}  # per session: the last position returned
        for op in self.ops:
            if op.f != "read" or op.outcome not in (OK, UNKNOWN):
                continue
            name = op.args["session"]
            if self.lost(op):  # it saw a state that is gone: only where it ended counts
                got = [tuple(p) for p, _ in op.result.get("values", ())]
                last[name] = max(got, default=last.get(name))
                continue
            key = (name, self.era(op))
            s = out.get(key)
            if s is None:
                start = op.args.get("start")
                start = None if start in (None, "earliest") else tuple(start)
                if name in last:  # a session that began before a restore: from there
                    start = last[name]
                label = name if key[1] == 0 else f"{name}@era{key[1]}"
                s = out[key] = _Session(label, op.args["topic"], start, [], [])
                s.era = key[1]
            s.reads.append(op)
            s.delivered += [(tuple(p), v, op) for p, v in op.result.get("values", ())]
            if s.delivered:
                last[name] = max(p for p, _, _ in s.delivered)
            s.complete = s.complete or bool(op.result.get("complete"))
        return list(out.values())

    def returned(self, op: Op, value: str, session: str) -> None:
        """A reader or consumer returned ``value``: it must be a committed winner's."""
        send = self.sends.get(value)
        if send is None:
            self.flag("phantom-read", f"{session} returned {value}, which nobody sent", op)
            return
        txn = send.args.get("txn")
        if txn is None:
            return
        if self.is_winner(send) is False:
            commit = next((c for c in self.commits[txn] if c.args.get("winners") is not None),
                          None)
            self.flag("losing-writer-read", f"{session} returned {value}, written by "
                      f"{send.args.get('writer')}, which the commit of {txn} did not name a "
                      "winner", send, commit, op)
            return
        before = [c for c in self.commits[txn] if c.invoked < op.completed]
        if not before:
            self.flag("open-read", f"{session} returned {value} of {txn} before any commit "
                      f"of {txn} was invoked", send, op)
            return
        self.prove(txn, COMMITTED, "read", f"{session} returned {value}", send, op)

    def reads(self) -> None:
        for op in self.ops:
            if op.f == "receive" and op.outcome in (OK, UNKNOWN) and not self.lost(op):
                for _, v in op.result.get("values", ()):
                    self.returned(op, v, f"consumer session {op.args['session']}")
        sessions = self.sessions()
        for s in sessions:
            seen: dict[str, Op] = {}
            for _, v, op in s.delivered:
                if v in seen:
                    self.flag("duplicate-read", f"reader session {s.name} returned {v} twice",
                              self.sends.get(v), seen[v], op)
                seen[v] = op
                self.returned(op, v, f"reader session {s.name}")
            self.passed_over(s, seen)
            self.key_order(s)
        self.replays(sessions)

    def passed_over(self, s: _Session, seen: dict[str, Op]) -> None:
        high = s.high
        for v, send in self.sends.items():
            p = self.position.get(v)
            if send.args["topic"] != s.topic or v in seen or p is None:
                continue
            if not ((s.start is None or p > s.start) and p < high):
                continue
            past = next((op for q, _, op in s.delivered if q > p), s.reads[-1])
            text = (f"reader session {s.name} read past {v} at {p} without returning it"
                    + (" (it read the topic to its end)" if s.complete else ""))
            txn = send.args.get("txn")
            if txn is None:
                if send.outcome == OK:
                    self.flag("lost-write", text + "; its plain send succeeded", send, past)
            elif self.is_winner(send) is not False:
                self.prove(txn, ABORTED, "passed-over", text, send, past)

    def key_order(self, s: _Session) -> None:
        last: dict[tuple, tuple[Op, Op]] = {}
        for _, v, op in s.delivered:
            send = self.sends.get(v)
            if send is None or not send.args.get("key"):
                continue
            k = (send.args.get("writer") or send.process, send.args["key"])
            prev = last.get(k)
            if prev is not None and prev[0].index > send.index:
                self.flag("key-order", f"reader session {s.name} returned {v} after "
                          f"{prev[0].args['value']}, both key {send.args['key']} from "
                          f"{k[0]}, which sent them the other way round",
                          prev[0], send, prev[1], op)
            last[k] = (send, op)

    def replays(self, sessions: list[_Session]) -> None:
        by_topic: dict[tuple, list[_Session]] = defaultdict(list)
        for s in sessions:
            by_topic[(s.topic, s.era)].append(s)
        for group in by_topic.values():
            for i, a in enumerate(group):
                for b in group[i + 1:]:
                    self.replay(a, b)

    def replay(self, a: _Session, b: _Session) -> None:
        """Where both sessions read the same range, they returned the same values."""
        lo = max([x for x in (a.start, b.start) if x is not None], default=None)
        hi = min(a.high, b.high)

        def inside(s: _Session) -> list[tuple[tuple, str, Op]]:
            return [d for d in s.delivered if (lo is None or d[0] > lo) and d[0] <= hi]

        da, db = inside(a), inside(b)
        if [d[1] for d in da] == [d[1] for d in db]:
            return
        diff = next((k for k, (x, y) in enumerate(zip(da, db)) if x[1] != y[1]),
                    min(len(da), len(db)))
        oa = da[diff] if diff < len(da) else None
        ob = db[diff] if diff < len(db) else None
        self.flag("unstable-replay",
                  f"reader sessions {a.name} and {b.name} both covered {a.topic} up to "
                  f"{hi if hi != _INF else 'its end'} but returned "
                  f"{oa[1] if oa else 'nothing'} and {ob[1] if ob else 'nothing'} as value "
                  f"{diff + 1} of that range",
                  *(x[2] for x in (oa, ob) if x), a.reads[-1], b.reads[-1])

    # ---- acks ----
    def acks(self) -> None:
        """Transactional acks: applied iff their transaction committed, never twice. A
        plain ack is at-least-once (pulsar-client groups it, a crash may lose it), so it
        counts only towards "twice"."""
        acks: dict[tuple, dict[str, list[Op]]] = defaultdict(lambda: defaultdict(list))
        for op in self.ops:
            if op.f == "ack" and op.outcome == OK:
                acks[(op.args["topic"], op.args["sub"])][op.args["value"]].append(op)
        committed_ok = {c.args["txn"]: c for c in self.ops if c.f == "commit" and self.decided(c)}
        for (topic, sub), by_value in acks.items():
            for v, ops in by_value.items():
                self.acked_twice(f"{topic}|{sub}", v, ops, committed_ok)
        # Which consumer sessions hold the promise at a receive (the module's doc): one
        # that acked under a txn before, or one that first received after a commit of an
        # ack on its subscription (its every pull saw a claim table with rows in it)
        txn_acked_at: dict[tuple[str, str], int] = {}  # (process, session) -> first
        began: dict[tuple[str, str], int] = {}  # (process, session) -> first receive
        for op in self.ops:
            k = (op.process, op.args.get("session"))
            if op.f == "ack" and op.args.get("txn") and k[1]:
                txn_acked_at[k] = min(txn_acked_at.get(k, op.invoked), op.invoked)
            elif op.f == "receive" and k not in began:
                began[k] = op.invoked
        first_commit: dict[tuple, int] = {}  # subscription -> first commit of an ack on it
        for key, by_value in acks.items():
            done = [committed_ok[a.args["txn"]].completed for ops in by_value.values()
                    for a in ops if a.args.get("txn") in committed_ok]
            if done:
                first_commit[key] = min(done)
        for op in self.ops:
            if op.f == "receive" and op.outcome in (OK, UNKNOWN):
                key = (op.args["topic"], op.args["sub"])
                k = (op.process, op.args.get("session"))
                acked_in_txn = txn_acked_at.get(k, op.invoked + 1) <= op.invoked
                informed = began.get(k, 0) > first_commit.get(key, began.get(k, 0))
                if not (acked_in_txn or informed):
                    continue  # holds pulsar-client's promise only (the module's doc)
                for _, v in op.result.get("values", ()):
                    for a in acks.get(key, {}).get(v, ()):
                        c = committed_ok.get(a.args.get("txn"))
                        if c is not None and c.completed < op.invoked:
                            self.flag("redelivered-after-commit",
                                      f"consumer session {op.args['session']} was handed {v} "
                                      f"on {key[0]}|{key[1]} after a transaction that acked "
                                      "it was reported committed", a, c, op)
        for op in self.ops:
            if op.f != "cursor" or op.outcome != OK or self.lost(op):
                continue
            key = (op.args["topic"], op.args["sub"])
            remaining = set(op.result["remaining"])
            tried = {a.args["value"] for a in self.ops if a.f == "ack" and a.outcome != FAIL
                     and (a.args["topic"], a.args["sub"]) == key}
            for v, send in self.sends.items():
                if (send.args["topic"] == key[0] and send.outcome == OK
                        and not send.args.get("txn") and send.completed < op.invoked
                        and v not in tried and v not in remaining):
                    self.flag("unacked-gone", f"{v} is gone from {key[0]}|{key[1]} although "
                              "no ack of it was made", send, op)
            for v, ops in acks.get(key, {}).items():
                before = [a for a in ops if a.completed < op.invoked]
                if not before or any(a.args.get("txn") is None for a in before):
                    continue  # a plain ack is at-least-once: a crash may lose it
                txns = {a.args["txn"] for a in before}
                if v in remaining:
                    for a in before:
                        self.prove(a.args["txn"], ABORTED, "ack-kept",
                                   f"{v}, which it acked, is still on {key[0]}|{key[1]}",
                                   a, op)
                elif len(txns) == 1 and not txns & self.forgotten:  # applied, then lost
                    self.prove(before[0].args["txn"], COMMITTED, "ack-applied",
                               f"{v}, which only it acked, is gone from {key[0]}|{key[1]}",
                               before[0], op)

    def acked_twice(self, where: str, v: str, ops: list[Op], committed: dict[str, Op]) -> None:
        """Two committed transactions acked ``v``, or a plain ack of it was accepted
        while a transaction that then committed held it (PENDING_ACK). Two plain acks
        are not an anomaly: a crash may lose the first."""
        held = [(a, committed[a.args["txn"]]) for a in ops if a.args.get("txn") in committed]
        if len({a.args["txn"] for a, _ in held}) > 1:
            (a1, c1), (a2, c2) = held[:2]
            self.flag("double-ack", f"{v} was acknowledged on {where} by two committed "
                      f"transactions, {a1.args['txn']} and {a2.args['txn']}",
                      self.sends.get(v), a1, c1, a2, c2)
            return
        for a, c in held:
            plain = next((p for p in ops if p.args.get("txn") is None
                          and a.completed < p.invoked and p.completed < c.completed), None)
            if plain is not None:
                self.flag("double-ack", f"a plain ack of {v} on {where} was accepted while "
                          f"{a.args['txn']} held it, and {a.args['txn']} committed",
                          self.sends.get(v), a, plain, c)
                return

    # ---- Spark micro-batches ----
    def batches(self) -> None:
        by_batch: dict[tuple, list[Op]] = defaultdict(list)
        for op in self.ops:
            if op.f == "batch":
                by_batch[(op.args["sink"], op.args.get("query"), op.args["batch_id"])].append(op)
        ok = {c.args["txn"]: c for c in self.ops if c.f == "commit" and self.decided(c)}
        for (sink, query, b), ops in by_batch.items():
            done = [(o, ok[o.args["txn"]]) for o in ops if o.args["txn"] in ok]
            if len({o.args["txn"] for o, _ in done}) > 1:
                (o1, c1), (o2, c2) = done[:2]
                by = f" of query {query}" if query else ""
                self.flag("batch-twice", f"micro-batch {sink}#{b}{by} committed as two "
                          f"transactions", o1, c1, o2, c2)
        for s in self.sessions():
            rows: dict[str, tuple[str, Op]] = {}
            for _, v, op in s.delivered:
                row = self.sends[v].args.get("row") if v in self.sends else None
                if row is None:
                    continue
                if row in rows:
                    self.flag("duplicate-row", f"reader session {s.name} returned row {row} "
                              f"twice ({rows[row][0]} and {v})", self.sends[rows[row][0]],
                              self.sends[v], rows[row][1], op)
                rows[row] = (v, op)

    def reused_ids(self) -> None:
        """A begin hands out a fresh id; a micro-batch's id belongs to its batch only."""
        owner: dict[str, tuple[object, Op]] = {}
        for op in self.ops:
            if op.outcome != OK:
                continue
            if op.f == "begin":
                key, txn = ("begin", op.index), op.result.get("txn")
            elif op.f == "batch" and op.args.get("txn"):
                key = ("batch", op.args["sink"], op.args.get("query"), op.args["batch_id"])
                txn = op.args["txn"]
            else:
                continue
            prev = owner.get(txn)
            if prev is not None and prev[0] != key:
                self.flag("reused-id", f"transaction id {txn} was handed out again",
                          prev[1], op)
            owner.setdefault(txn, (key, op))

    # ---- verdicts ----
    def fates(self) -> None:
        for txn, ev in self.evidence.items():
            commit = [e for e in ev if e.fate == COMMITTED]
            abort = [e for e in ev if e.fate == ABORTED]
            if not commit or not abort:
                continue
            kind, c, a = "inconsistent-outcome", commit[0], abort[0]
            for (cw, aw), name in _PAIRS:
                cs = [e for e in commit if e.why == cw]
                as_ = [e for e in abort if e.why == aw]
                if cs and as_:
                    kind, c, a = name, cs[0], as_[0]
                    break
            self.flag(kind, f"transaction {txn}: {c.text}, yet {a.text}", *c.ops, *a.ops)

    def failed_sends(self) -> None:
        """A transaction whose send raised (the caller was told it failed, or could not
        tell) never commits: the commit fails, as Kafka's does after a failed send."""
        raised: dict[str, Op] = {}
        for op in self.ops:
            if op.f == "send" and op.args.get("txn") and op.outcome in (FAIL, UNKNOWN):
                raised.setdefault(op.args["txn"], op)
        for op in self.ops:
            s = raised.get(op.args.get("txn")) if op.f == "commit" else None
            if s is not None and op.outcome == OK and s.invoked < op.invoked:
                self.flag("commit-after-failed-send",
                          f"transaction {op.args['txn']} committed although its send of "
                          f"{s.args['value']} raised before the commit", s, op)

    # ---- the operator's edges ----
    def wire_forms(self) -> None:
        """After a ``wire-format`` switch reported success, until the next switch (or a
        restore of the metastore, which may bring the old form back), every
        transactional append of a transaction that may commit uses the form it switched
        to. One of a transaction that never commits is never delivered, so no reader of
        either build has to read it (a writer that has not learned yet that its
        transaction timed out, or was lost with the metastore's host, may append)."""
        marks = [op for op in self.ops if op.f == "wire-format"
                 or (op.f == "fault" and "lost_after" in op.args)]
        may_commit = {c.args["txn"] for c in self.ops
                      if c.f == "commit" and c.outcome in (OK, UNKNOWN)}
        may_commit |= {t for t, ev in self.evidence.items()
                       if any(e.fate == COMMITTED for e in ev)}
        for send in self.ops:
            form = send.result.get("form") if send.f == "send" and send.outcome == OK else None
            if form is None or send.args.get("txn") not in may_commit:
                continue
            before = [m for m in marks if m.invoked < send.invoked]
            last = before[-1] if before else None
            if (last is not None and last.f == "wire-format" and last.outcome == OK
                    and last.completed < send.invoked and last.args["form"] != form):
                self.flag("stale-wire-form", f"{send.args['value']} was appended in the "
                          f"{form}-property form after the namespace was switched to the "
                          f"{last.args['form']}-property form", last, send)

    def resets(self) -> None:
        """A process running when the metastore was reset stops: nothing begun, sent or
        acked in a transaction, committed, and no transactional value read or acked,
        after it (plain messages are no metastore's: a plain ack of one may go on)."""
        txn_values = {v for v, op in self.sends.items() if op.args.get("txn")}
        for reset in (op for op in self.ops if op.args.get("reset")):
            before = set(reset.args.get("before", ()))
            for op in self.ops:
                if op.process not in before or op.invoked < reset.invoked or op.outcome != OK:
                    continue
                read = [v for _, v in op.result.get("values", ())]
                if (op.f in ("begin", "commit")
                        or (op.f in ("send", "ack") and op.args.get("txn"))
                        or (op.f == "ack" and op.args["value"] in txn_values)
                        or (op.f in ("read", "receive")
                            and any(v in txn_values or v not in self.sends for v in read))):
                    self.flag("crossed-reset", f"{op.process} still acted after the "
                              "metastore was reset: it must stop, naming metastore.url",
                              reset, op)

    def secrets(self) -> None:
        """No error or log line shows a secret that a setting carried."""
        secret = {op.args["secret"]: op for op in self.ops if op.args.get("secret")}
        for op in self.ops:
            shown = " ".join(str(v) for v in op.result.values())
            for s, where in secret.items():
                if s in shown:
                    self.flag("secret-shown", f"the secret of {where.describe()!r} "
                              f"appears in what {op.process} reported", where, op)

    def run(self) -> list[Anomaly]:
        self.decisions()
        self.wire_forms()
        self.secrets()
        self.resets()
        self.failed_sends()
        self.reads()
        self.acks()
        self.batches()
        self.reused_ids()
        self.fates()
        return sorted(self.anomalies, key=lambda x: min((o.index for o in x.ops), default=-1))


def check(history: History) -> list[Anomaly]:
    """Every anomaly ``history`` shows (empty: it is consistent)."""
    return _Checker(history).run()


def explain(anomalies: list[Anomaly]) -> str:
    return "\n".join(str(a) for a in anomalies) or "0 anomalies"
