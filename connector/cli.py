"""pulsar-txn: operate transactions and scalable topics from a shell.

The lingering-transaction tool: list OPEN txns and how old they are, describe one,
abort one by id, run the timeout and GC sweeps, find the txn of an owner (for
example a Spark sink batch's ``<sink id>|<query id>|<batchId>``). The scalable-topic
admin: ``topic create|describe|split|merge|list``. ``dev``: the embedded services.

The global options (``--metastore``, ``--namespace``, ``--json``) are accepted before
or after the subcommand. Exit codes: 0 done; 1 nothing found (``find``, ``batch``) or a
``wire-format`` switch not finished yet; 2 bad input, an unknown transaction, topic or
namespace, a refused operation, or a service that did not answer.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from contextlib import contextmanager
from datetime import datetime, timezone

from pulsar_txn.cli_topics import (
    Progress,
    fail,
    print_table,
    pulsar_client,
    topic_main,
    topic_options,
    topic_parser,
)
from pulsar_txn.coordinator import DEFAULT_RETENTION_MS, TransactionCoordinator
from pulsar_txn.errors import PulsarTxnError
from pulsar_txn.harness.dev import run as run_dev
from pulsar_txn.harness.services import BROKERS
from pulsar_txn.metastore import open_store
from pulsar_txn.metrics import serve
from pulsar_txn.pending_ack import settle_committed_acks
from pulsar_txn.records import WIRE_NAMES, WIRE_ONE, WIRE_THREE, TxnHeader, TxnId, sink_owner
from pulsar_txn.spark.options import sink_id_for_checkpoint
from pulsar_txn.state import TxnState


def _iso(ms: int | None) -> str | None:
    if ms is None:
        return None
    return datetime.fromtimestamp(ms / 1000, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _duration(seconds: float) -> str:
    """12.3s, 4m05s, 2h03m, 3d04h."""
    s = abs(seconds)
    if s < 60:
        return f"{s:.1f}s"
    for unit, size, sub, sub_size in (("d", 86400, "h", 3600), ("h", 3600, "m", 60),
                                      ("m", 60, "s", 1)):
        if s >= size:
            return f"{int(s // size)}{unit}{int(s % size // sub_size):02d}{sub}"
    return f"{s:.1f}s"  # not reached


def _header_dict(h: TxnHeader, now_ms: int) -> dict:
    """The machine fields (``--json``): times in ms and ISO 8601 UTC, ages in seconds."""
    return {
        "txn": str(h.txn_id), "state": h.state.value, "owner": h.owner,
        "age_s": round((now_ms - h.created_ms) / 1000, 1),
        "deadline_in_s": round((h.deadline_ms - now_ms) / 1000, 1),
        "finalized_ms": h.finalized_ms, "winners": sorted(h.winners),
        "unapplied_ack_records": h.open_ack_records,
        "created": _iso(h.created_ms), "deadline": _iso(h.deadline_ms),
        "finalized": _iso(h.finalized_ms),
        "past_deadline": h.state is TxnState.OPEN and h.deadline_ms < now_ms,
    }


def _readable(row: dict) -> dict:
    """A transaction row for people: ISO times, durations, lists as commas."""
    if "age_s" not in row:
        return row
    left = row["deadline_in_s"]
    deadline = ("" if row["state"] != "OPEN" else
                f"overdue {_duration(left)} (the next sweep aborts it)" if row["past_deadline"]
                else f"in {_duration(left)}")
    out = {"txn": row["txn"], "state": row["state"], "owner": row["owner"],
           "created": row["created"], "age": _duration(row["age_s"]), "deadline": deadline,
           "finalized": row["finalized"] or "", "winners": ",".join(row["winners"]),
           "unapplied_acks": row["unapplied_ack_records"]}
    skip = {"age_s", "deadline_in_s", "finalized_ms", "unapplied_ack_records", "past_deadline"}
    out.update({k: v for k, v in row.items() if k not in out and k not in skip})
    return out


def _print(rows: list[dict], as_json: bool) -> None:
    if as_json:
        print(json.dumps(rows, indent=2))
    else:
        print_table([_readable(r) for r in rows])


@contextmanager
def _ticking(progress: Progress, counts: dict, obj, method: str, label: str):
    """Count each call of ``obj.method`` (one per transaction) while the block runs."""
    if not progress.on:
        yield
        return
    real = getattr(obj, method)
    counts[label] = 0

    def counted(*args, **kwargs):
        counts[label] += 1
        progress("sweep: " + ", ".join(f"{n:,} {what}" for what, n in counts.items()))
        return real(*args, **kwargs)

    setattr(obj, method, counted)
    try:
        yield
    finally:
        delattr(obj, method)


def _sweep(store, coord: TransactionCoordinator, args) -> int:
    progress, t0, counts = Progress(), time.monotonic(), {}
    progress("sweep: aborting expired transactions, finishing cleanups, collecting old ones")
    try:
        with _ticking(progress, counts, store, "end_txn", "expired aborted"), \
                _ticking(progress, counts, store, "gc_txn", "finalized collected"):
            done = coord.sweep_all(args.retention_ms)
    finally:
        progress.done()
    _print([{**done, "seconds": round(time.monotonic() - t0, 3)}], args.json)
    return 0


# options whose default comes from an environment variable that may hold a secret
_DEFAULT_NOT_SHOWN = {"metastore", "service_url", "admin_url", "auth_plugin", "auth_params",
                      "tls_trust_certs_file", "namespace"}


class _HelpFormatter(argparse.HelpFormatter):
    """Shows a default where there is one worth showing (not None or False, not one
    taken from the environment, not one the help already gives)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if (action.option_strings and "default" not in text and action.default not in
                (None, False, argparse.SUPPRESS) and action.dest not in _DEFAULT_NOT_SHOWN):
            text += " (default: %(default)s)"
        return text


class _Parser(argparse.ArgumentParser):
    """Bad input is one line on stderr and exit 2 (``--help`` has the usage)."""

    def __init__(self, *args, **kwargs) -> None:
        kwargs.setdefault("formatter_class", _HelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str):
        self.exit(2, f"{self.prog}: {message} (see --help)\n")


def _global_options(defaults: bool) -> argparse.ArgumentParser:
    """The options every command takes. The top-level parser holds the defaults; each
    subcommand accepts the same options with no default of its own (SUPPRESS), so a
    value given before the subcommand is kept and one given after it is taken."""
    p = argparse.ArgumentParser(add_help=False)

    def default(value):
        return value if defaults else argparse.SUPPRESS

    p.add_argument("--metastore", default=default(os.environ.get("PULSAR_TXN_METASTORE")),
                   help="metastore URL (redis://, rediss://, unix://); env PULSAR_TXN_METASTORE")
    p.add_argument("--namespace",
                   default=default(os.environ.get("PULSAR_TXN_NAMESPACE", "ptxn")),
                   help="metastore key prefix of the deployment; env PULSAR_TXN_NAMESPACE, "
                   "else ptxn")
    p.add_argument("--json", action="store_true", default=default(False), help="print JSON")
    return p


def _non_negative_int(text: str) -> int:
    """A count of milliseconds: 0 or more (-1 would collect every finalized txn)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{value} is negative (0 or more milliseconds)")
    return value


def _txn_commands(sub, common: list[argparse.ArgumentParser]) -> None:
    ls = sub.add_parser("list", help="list transactions", parents=common)
    ls.add_argument("--state", choices=["open", "finalized", "acks-pending"], default="open",
                    help="acks-pending: committed transactions whose acks are not settled "
                    "(their consumer died before writing the tombstones); GC settles them "
                    "past the retention, settle-acks at once")
    ls.add_argument("--older-than", type=float, default=0.0, metavar="SECONDS",
                    help="only transactions created more than SECONDS ago")
    txn = "transaction id (v5:<partition>:<sequence>)"
    sub.add_parser("describe", help="one transaction: its header and write records (JSON)",
                   parents=common).add_argument("txn", help=txn)
    sub.add_parser("show", parents=common).add_argument("txn", help=txn)  # describe's old name
    sub.add_parser("abort", help="abort an OPEN transaction by id", parents=common
                   ).add_argument("txn", help=txn)
    sub.add_parser("settle-acks", help="settle a committed transaction's unapplied acks "
                   "without its consumer: every consumer of the subscription then acks those "
                   "messages when they are delivered", parents=common
                   ).add_argument("txn", help=txn)
    sub.add_parser("find", help="the transaction of an owner", parents=common).add_argument(
        "owner", help="the owner recorded at begin (a Spark sink batch's is "
        "'<sink id>|<query id>|<batchId>')")
    bt = sub.add_parser("batch", help="the transaction of a Spark sink's batch", parents=common)
    bt.add_argument("sink", help="the sink.id, or the query's checkpoint location")
    bt.add_argument("batch_id", type=int, help="the micro-batch id (Spark's batchId)")
    sw = sub.add_parser("sweep", help="abort expired txns, finish cleanups, collect old "
                        "finalized ones", parents=common)
    sw.add_argument("--retention-ms", type=_non_negative_int, default=DEFAULT_RETENTION_MS,
                    help="collect transactions finalized longer ago than this (ms, >= 0; "
                    "as the Spark option transaction.retention.ms)")


def _wire_format_command(sub, common: list[argparse.ArgumentParser]) -> None:
    wf = sub.add_parser("wire-format", help="the form of the properties transactional "
                        "appends carry in this namespace; --upgrade switches an earlier "
                        "build's namespace to the one-property form", parents=common)
    switch = wf.add_mutually_exclusive_group()
    switch.add_argument("--upgrade", action="store_true",
                        help="only once every process that reads the namespace is of this "
                        "build or later: earlier builds never deliver the one-property form")
    switch.add_argument("--downgrade", action="store_true",
                        help="back to the three-property form, for a reader of an earlier "
                        "build that has to run again")
    wf.add_argument("--wait-s", type=float, default=120.0, metavar="SECONDS",
                    help="how long a switch waits for the open transactions whose writers "
                    "registered the other form (it reports success only once none is left)")


def build_parser() -> argparse.ArgumentParser:
    ap = _Parser(prog="pulsar-txn", description=__doc__.splitlines()[0],
                 epilog="exit codes: 0 done; 1 nothing found (find, batch) or a wire-format "
                 "switch not finished yet; 2 bad input, an unknown transaction, topic or "
                 "namespace, a refused operation, or a service that did not answer",
                 parents=[_global_options(True), topic_options(True)])
    ap.add_argument("--version", action="version", version=f"%(prog)s {_version()}",
                    help="print the installed version and exit")
    common = [_global_options(False)]
    sub = ap.add_subparsers(dest="cmd", required=True, metavar="COMMAND")
    _txn_commands(sub, common)
    _wire_format_command(sub, common)
    init = sub.add_parser("init", help="create the namespace if it does not exist (the one "
                          "step before a broker plugin governs its topics) and print it",
                          parents=common)
    init.add_argument("--partitions", type=int, metavar="P",
                      help="metastore partitions of a new namespace (default: the library's)")
    mt = sub.add_parser("metrics", help="Prometheus metrics of the deployment")
    ms = mt.add_subparsers(dest="metrics_cmd", required=True, metavar="COMMAND")
    serve = ms.add_parser("serve", help="serve /metrics over HTTP until interrupted; with "
                          "--service-url (and the broker's credentials) also the "
                          "per-segment gate lag", parents=[*common, topic_options(False)])
    serve.add_argument("--port", type=int, default=9464, help="TCP port to listen on")
    serve.add_argument("--addr", default="0.0.0.0", help="address to listen on")
    topic_parser(sub, common)
    dv = sub.add_parser("dev", help="start the embedded services (a Redis-compatible server "
                        "and a broker) on loopback, print their URLs and the lines to paste, "
                        "keep them until Ctrl-C")
    dv.add_argument("--broker", choices=BROKERS, default=None,
                    help="which broker: pulsar-lite, the reference Apache Pulsar broker or a "
                    "testcontainer; env PULSAR_TXN_BROKER, else lite")
    dv.add_argument("--namespace", default=argparse.SUPPRESS,
                    help="the namespace created for you (default ptxn)")
    dv.add_argument("--broker-plugin", metavar="DIR", default=None,
                    help="the reference broker with pulsar-txn's broker plugin built from "
                    "DIR (the repository's broker-plugin/; needs Maven): plain consumers of "
                    "public/default get READ_COMMITTED (docs/broker-plugin.md)")
    return ap


def _wire_format(store, coord: TransactionCoordinator, args) -> int:
    """Show or switch the form of the namespace's transactional appends. A switch
    reaches every writer at its next write registration (read in the registration's
    script); a run registered before it may still append the other form until its
    transaction ends, so the switch reports success only once no open transaction has
    such a run, and fails (exit 1, naming them) if some are left after ``--wait-s``."""
    switching = args.upgrade or args.downgrade
    if switching:
        store.set_wire_format(WIRE_ONE if args.upgrade else WIRE_THREE)
    target = store.wire_format
    deadline = time.monotonic() + args.wait_s
    left = store.txns_writing_other_form(target)
    while switching and left and time.monotonic() < deadline:
        time.sleep(0.2)
        coord.sweep_timeouts()  # an expired one ends now, not at a sweeper's next pass
        left = store.txns_writing_other_form(target)
    _print([{"namespace": args.namespace, "wire_format": WIRE_NAMES[target],
             "open_with_other_form": [str(t) for t in left]}], args.json)
    if switching and left:
        other = WIRE_NAMES[WIRE_THREE if target == WIRE_ONE else WIRE_ONE]
        print(f"error: namespace {args.namespace!r} now appends the {WIRE_NAMES[target]} "
              f"form from every new write registration on, but {len(left)} open "
              f"transaction(s) registered {other} writes before the switch and may still "
              f"append them: {', '.join(map(str, left[:20]))}. Not switched yet: run this "
              "command again once they end (commit, abort or their timeout), or end them "
              "with `pulsar-txn abort <id>`; it succeeds only when none is left",
              file=sys.stderr)
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = build_parser()
    args = ap.parse_args(argv)
    if args.cmd == "dev":
        return run_dev(args.broker, args.namespace, broker_plugin=args.broker_plugin)
    if not args.metastore:
        ap.error("--metastore (or PULSAR_TXN_METASTORE) is required")
    if args.cmd == "topic":
        return topic_main(ap, args)
    if args.cmd == "metrics":
        return _metrics_main(args)
    try:
        # only an explicit write may create a namespace: a read (list, describe, find,
        # batch), an abort or a sweep of one that does not exist names those that do
        switching = args.cmd == "wire-format" and bool(args.upgrade or args.downgrade)
        if args.cmd == "init":
            store = open_store(args.metastore, namespace=args.namespace, create=True,
                               partitions=args.partitions)
            _print([{"namespace": args.namespace, "partitions": store.partitions,
                     "layout": store.keys.layout, "deployment": store.deployment}], args.json)
            return 0
        store = open_store(args.metastore, namespace=args.namespace, create=switching)
        coord = TransactionCoordinator(store, materialize_inline=True)  # done before exit
        return _txn_main(store, coord, args)
    except PulsarTxnError as e:
        return fail(e)


def _list(store, args, now: int) -> None:
    ids = ([t for t, _ in store.open_txns()] if args.state == "open"
           else [t for t, _ in store.finalized_txns()])
    headers = [h for h in store.get_headers(ids).values() if h is not None]
    if args.state == "acks-pending":
        headers = [h for h in headers
                   if h.state is TxnState.COMMITTED and h.open_ack_records > 0]
    _print([_header_dict(h, now) for h in sorted(headers, key=lambda h: h.created_ms)
            if now - h.created_ms >= args.older_than * 1000], args.json)


def _batch(store, coord: TransactionCoordinator, args, now: int) -> int:
    sink = args.sink
    if "/" in sink or sink.startswith("file:") or os.path.isdir(sink):
        sink = sink_id_for_checkpoint(sink)  # the query id in its metadata file
    last, query_id = store.sink_progress(sink)
    t = store.find_owner(sink_owner(sink, query_id, args.batch_id)) if query_id else None
    if t is None:
        print(f"no transaction recorded for batch {args.batch_id} of sink {sink!r} "
              f"(collected, or never written); last committed batch: {last}", file=sys.stderr)
        return 1
    row = _header_dict(coord.get(t), now)
    row["sink"], row["batch"] = sink, args.batch_id
    _print([row], args.json)
    return 0


def _txn_main(store, coord: TransactionCoordinator, args) -> int:
    now = store.server_time_ms()
    if args.cmd == "list":
        _list(store, args, now)
    elif args.cmd in ("describe", "show"):  # show: the old name, kept working
        h = coord.get(TxnId.parse(args.txn))
        row = _header_dict(h, now)
        recs, _ = store.list_writes(h.txn_id)
        row["writes"] = [{"segment": r.segment, "writer": r.writer,
                          "first": str(r.first) if r.first else None} for r in recs]
        print(json.dumps(row, indent=2))
    elif args.cmd == "settle-acks":
        t = TxnId.parse(args.txn)
        h = coord.get(t)
        if h.state is not TxnState.COMMITTED:
            return fail(f"{t} is {h.state.value}: only a committed transaction's acks are "
                         "settled (an open one is aborted with 'abort')")
        settled = settle_committed_acks(store, t)
        _print([{**_header_dict(coord.get(t), now), "settled_records": settled}], args.json)
    elif args.cmd == "abort":
        _print([_header_dict(coord.abort(TxnId.parse(args.txn)), now)], args.json)
    elif args.cmd == "find":
        t = store.find_owner(args.owner)
        if t is None:
            print(f"no transaction recorded for owner {args.owner!r}", file=sys.stderr)
            return 1
        _print([_header_dict(coord.get(t), now)], args.json)
    elif args.cmd == "batch":
        return _batch(store, coord, args, now)
    elif args.cmd == "wire-format":
        return _wire_format(store, coord, args)
    elif args.cmd == "sweep":
        return _sweep(store, coord, args)
    return 0


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("pulsar-txn")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown (not installed)"


def _metrics_main(args) -> int:
    import threading

    client = None
    if args.service_url:
        try:
            client, _ = pulsar_client(args)
        except PulsarTxnError as e:
            return fail(e)
    try:
        server, _ = serve(args.metastore, args.namespace, args.port, args.addr, client)
    except PulsarTxnError as e:  # e.g. a namespace that does not exist: named, one line
        return fail(e)
    except OSError as e:  # the port is taken, or the address is not this host's
        return fail(f"metrics serve cannot listen on {args.addr}:{args.port} "
                     f"(--addr, --port): {e.strerror or e}")
    print(f"serving Prometheus metrics on http://{args.addr}:{args.port}/metrics "
          f"(namespace {args.namespace}); Ctrl-C stops", flush=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        server.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
