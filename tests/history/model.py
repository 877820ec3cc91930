"""The history: every operation with its invocation and its completion.

Why a logical clock and not timestamps: "a read completed before the commit was
invoked" must be decided exactly, and the steps of one test process are totally
ordered, so a counter bumped at every invocation and every completion is the real
time order of the run. An operation whose client died before it answered stays
``unknown``: the checker accepts either outcome, as long as one of them explains
everything else the history shows.

Values are unique strings, so every value read names the one send that wrote it.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

OK, FAIL, UNKNOWN, PENDING = "ok", "fail", "unknown", "pending"
Pos = tuple  # (ledger, entry, batch index): ordered as the segment is


@dataclass(eq=False)
class Op:
    """One client operation, compared by identity. ``f`` is one of: begin, send,
    commit, abort, sweep, read, receive, ack, batch, cursor, fault."""

    index: int
    process: str
    f: str
    invoked: int
    args: dict[str, Any]
    completed: int | None = None
    outcome: str = PENDING
    result: dict[str, Any] = field(default_factory=dict)

    def describe(self) -> str:
        a = self.args
        what = {
            "send": lambda: (f"send {a['value']} to {a['topic']}"
                             + (f" key {a['key']}" if a.get("key") else "")
                             + (f" under {a['txn']} as {a.get('writer')}" if a.get("txn")
                                else " (plain)")),
            "commit": lambda: f"commit {a['txn']}" + (f" winners {sorted(a['winners'])}"
                                                      if a.get("winners") is not None else ""),
            "abort": lambda: f"abort {a['txn']}",
            "begin": lambda: "begin a transaction",
            "sweep": lambda: "sweep timeouts",
            "read": lambda: f"read {a['topic']} in session {a['session']} from {a['start']}",
            "receive": lambda: f"receive on {a['topic']}|{a['sub']} in session {a['session']}",
            "ack": lambda: (f"{'cumulative ' if a.get('cumulative') else ''}ack {a['value']} on "
                            f"{a['topic']}|{a['sub']}"
                            + (f" under {a['txn']}" if a.get("txn") else " (plain)")),
            "batch": lambda: (f"micro-batch {a['sink']}#{a['batch_id']}"
                              f"{' of query ' + a['query'] if a.get('query') else ''}"
                              f" as {a['txn']}"),
            "cursor": lambda: f"look at the subscription {a['topic']}|{a['sub']}",
            "fault": lambda: f"fault: {a['what']}",
            "wire-format": lambda: f"switch the namespace to the {a['form']}-property form",
            "open": lambda: f"open a client with a mistake: {a['mistake']}",
            "log": lambda: "the clients' log lines",
        }.get(self.f, lambda: f"{self.f} {a}")()
        res = {k: v for k, v in self.result.items() if k != "values"}
        if "values" in self.result:
            res["values"] = [v for _, v in self.result["values"]]
        shown = f" {res}" if res else ""
        return f"#{self.index} [{self.process}] {what} -> {self.outcome}{shown}"


class History:
    """Append-only record of a run's operations.

    ``clock``: None counts steps (one process); a run with several OS processes
    passes ``time.monotonic_ns``, one clock for every process of the host, and
    merges the others' records with ``merge``."""

    def __init__(self, clock=None) -> None:
        self.ops: list[Op] = []
        self._clock = 0
        self._now = clock

    def _tick(self) -> int:
        self._clock = self._now() if self._now is not None else self._clock + 1
        return self._clock

    def invoke(self, process: str, f: str, **args: Any) -> Op:
        op = Op(len(self.ops), process, f, self._tick(), args)
        self.ops.append(op)
        return op

    def complete(self, op: Op, outcome: str, **result: Any) -> Op:
        if op.outcome != PENDING:
            raise ValueError(f"operation {op.describe()} completed twice")
        op.completed, op.outcome = self._tick(), outcome
        op.result.update(result)
        return op

    def ok(self, op: Op, **result: Any) -> Op:
        return self.complete(op, OK, **result)

    def fail(self, op: Op, error: str, **result: Any) -> Op:
        return self.complete(op, FAIL, error=error, **result)

    def unknown(self, op: Op, why: str) -> Op:
        return self.complete(op, UNKNOWN, error=why)

    def note(self, process: str, f: str, **args: Any) -> Op:
        """An instantaneous event (a fault injected, a sweep's report)."""
        return self.ok(self.invoke(process, f, **args))

    def crash(self, process: str, why: str = "the process crashed") -> None:
        """Every operation of ``process`` still waiting for its answer never gets one."""
        for op in self.ops:
            if op.process == process and op.outcome == PENDING:
                self.unknown(op, why)

    def restore(self, clock: int, process: str = "store") -> Op:
        """The metadata store restarts on a copy of its state at ``clock`` (a backup, a
        host crash under a weaker fsync mode): the decisions clients saw after it may be
        gone, so their outcomes become unknown, and what was observed in between saw a
        state that no longer exists (the checker sets it aside; see ``checker``)."""
        why = f"lost with the restore of the metastore to its copy at #{clock}"
        for op in self.ops:
            if (op.f in ("commit", "abort", "sweep") and op.completed is not None
                    and op.completed > clock and op.outcome == OK):
                op.outcome, op.result = UNKNOWN, {**op.result, "error": why, "forgotten": True}
        return self.note(process, "fault", what=f"metastore restored to its copy at #{clock}",
                         lost_after=clock)

    @contextmanager
    def op(self, process: str, f: str, **args: Any) -> Iterator[Op]:
        """Invoke, run the body, complete: ok unless the body completed it; an
        exception is a failure (re-raised)."""
        op = self.invoke(process, f, **args)
        try:
            yield op
        except BaseException as e:
            if op.outcome == PENDING:
                self.fail(op, f"{type(e).__name__}: {e}")
            raise
        if op.outcome == PENDING:
            self.ok(op)

    def merge(self, records: list[dict]) -> None:
        """Add another process's records (``Recorder`` lines): an operation with no
        completion died with its process and is unknown. Operations are then ordered
        by invocation, as if one history had recorded them all."""
        ops: dict[int, Op] = {}
        for r in records:
            if r["ev"] == "invoke":
                ops[r["i"]] = Op(-1, r["process"], r["f"], r["t"], r["args"])
            elif r["i"] in ops:
                op = ops[r["i"]]
                op.completed, op.outcome, op.result = r["t"], r["ev"], r["result"]
        for op in ops.values():
            if op.outcome == PENDING:
                op.completed, op.outcome = self._tick(), UNKNOWN
                op.result = {"error": "its process was killed before the answer"}
            if "values" in op.result:
                op.result["values"] = [(tuple(p), v) for p, v in op.result["values"]]
            if op.result.get("position") is not None:
                op.result["position"] = tuple(op.result["position"])
        self.ops = sorted(self.ops + list(ops.values()), key=lambda o: o.invoked)
        for i, op in enumerate(self.ops):
            op.index = i

    @property
    def now(self) -> int:
        return self._clock

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for op in self.ops:
            out[op.f] = out.get(op.f, 0) + 1
        return out

    def __str__(self) -> str:
        return "\n".join(op.describe() for op in self.ops)


class Recorder(History):
    """A history that also writes every invocation and completion as one JSON line,
    flushed at once, so a process SIGKILLed mid-operation leaves what it did."""

    def __init__(self, path, clock) -> None:
        super().__init__(clock)
        self._file = open(path, "a", buffering=1)

    def invoke(self, process: str, f: str, **args: Any) -> Op:
        op = super().invoke(process, f, **args)
        self._write({"ev": "invoke", "i": op.index, "process": process, "f": f,
                     "t": op.invoked, "args": args})
        return op

    def complete(self, op: Op, outcome: str, **result: Any) -> Op:
        super().complete(op, outcome, **result)
        self._write({"ev": outcome, "i": op.index, "t": op.completed, "result": op.result})
        return op

    def _write(self, record: dict) -> None:
        self._file.write(json.dumps(record, default=list) + "\n")
