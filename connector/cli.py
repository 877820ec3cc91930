"""``pulsar-txn``: operate transactions and scalable topics from a shell.

The lingering-transaction tool: list OPEN txns and how old they are, show one,
abort one by id, run the timeout and GC sweeps, find the txn of an owner (for
example a Spark sink batch's ``<sink id>|<query id>|<batchId>``). And the scalable-topic
admin: ``topic create|describe|split|merge|list``.

The global options (``--metastore``, ``--namespace``, ``--json``) are accepted before
or after the subcommand.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

from pulsar_txn.admin import check_admin_url
from pulsar_txn.connection import (
    admin_auth,
    authentication,
    check_service_url,
    quiet_logger,
)
from pulsar_txn.coordinator import DEFAULT_RETENTION_MS, TransactionCoordinator
from pulsar_txn.errors import PulsarTxnError
from pulsar_txn.metastore import open_store
from pulsar_txn.metrics import serve
from pulsar_txn.pending_ack import settle_committed_acks
from pulsar_txn.records import WIRE_NAMES, WIRE_ONE, WIRE_THREE, TxnHeader, TxnId, sink_owner
from pulsar_txn.scalable.admin import ScalableTopics
from pulsar_txn.spark.options import sink_id_for_checkpoint
from pulsar_txn.state import TxnState


def _header_dict(h: TxnHeader, now_ms: int) -> dict:
    return {
        "txn": str(h.txn_id), "state": h.state.value, "owner": h.owner,
        "age_s": round((now_ms - h.created_ms) / 1000, 1),
        "deadline_in_s": round((h.deadline_ms - now_ms) / 1000, 1),
        "finalized_ms": h.finalized_ms, "winners": sorted(h.winners),
        "unapplied_ack_records": h.open_ack_records,
    }


def _print(rows: list[dict], as_json: bool) -> None:
    if as_json:
        print(json.dumps(rows, indent=2))
        return
    if not rows:
        print("(none)")
        return
    cols = list(rows[0])
    widths = {c: max(len(c), *(len(str(r[c])) for r in rows)) for c in cols}
    print("  ".join(c.ljust(widths[c]) for c in cols))
    for r in rows:
        print("  ".join(str(r[c]).ljust(widths[c]) for c in cols))


def _global_options(defaults: bool) -> argparse.ArgumentParser:
    """The options every command takes. The top-level parser holds the defaults; each
    subcommand accepts the same options with no default of its own (SUPPRESS), so a
    value given before the subcommand is kept and one given after it is taken."""
    p = argparse.ArgumentParser(add_help=False)

    def default(value):
        return value if defaults else argparse.SUPPRESS

    p.add_argument("--metastore", default=default(os.environ.get("PULSAR_TXN_METASTORE")),
                   help="metastore URL (redis://, rediss://); env PULSAR_TXN_METASTORE")
    p.add_argument("--namespace",
                   default=default(os.environ.get("PULSAR_TXN_NAMESPACE", "ptxn")),
                   help="metastore key prefix of the deployment (default ptxn)")
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


class _Parser(argparse.ArgumentParser):
    """Bad input is one line on stderr and exit 2 (``--help`` has the usage)."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: {message} (see --help)\n")


def build_parser() -> argparse.ArgumentParser:
    ap = _Parser(prog="pulsar-txn", description=__doc__.splitlines()[0],
                 parents=[_global_options(True), _topic_options(True)])
    ap.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    common = [_global_options(False)]
    sub = ap.add_subparsers(dest="cmd", required=True)
    ls = sub.add_parser("list", help="list transactions", parents=common)
    ls.add_argument("--state", choices=["open", "finalized", "acks-pending"], default="open",
                    help="acks-pending: committed transactions whose acks are not settled "
                    "(their consumer died before writing the tombstones); GC settles them "
                    "past the retention, settle-acks at once")
    ls.add_argument("--older-than", type=float, default=0.0, metavar="SECONDS",
                    help="only transactions created more than SECONDS ago")
    sub.add_parser("show", help="show one transaction", parents=common).add_argument("txn")
    sub.add_parser("abort", help="abort an OPEN transaction by id", parents=common
                   ).add_argument("txn")
    sub.add_parser("settle-acks", help="settle a committed transaction's unapplied acks "
                   "without its consumer: every consumer of the subscription then acks those "
                   "messages when they are delivered", parents=common).add_argument("txn")
    sub.add_parser("find", help="the transaction of an owner (a Spark sink batch's is "
                   "'<sink id>|<query id>|<batchId>')", parents=common).add_argument("owner")
    bt = sub.add_parser("batch", help="the transaction of a Spark sink's batch", parents=common)
    bt.add_argument("sink", help="the sink.id, or the query's checkpoint location")
    bt.add_argument("batch_id", type=int)
    sw = sub.add_parser("sweep", help="abort expired txns, finish cleanups, collect old "
                        "finalized ones", parents=common)
    sw.add_argument("--retention-ms", type=_non_negative_int, default=DEFAULT_RETENTION_MS,
                    help="collect transactions finalized longer ago than this (ms, >= 0; "
                    "as the Spark option transaction.retention.ms)")
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
                    "registered the other form (it reports success only once none is "
                    "left; default 120)")
    mt = sub.add_parser("metrics", help="Prometheus metrics of the deployment")
    ms = mt.add_subparsers(dest="metrics_cmd", required=True)
    serve = ms.add_parser("serve", help="serve /metrics over HTTP until interrupted; with "
                          "--service-url (and the broker's credentials) also the "
                          "per-segment gate lag", parents=[*common, _topic_options(False)])
    serve.add_argument("--port", type=int, default=9464)
    serve.add_argument("--addr", default="0.0.0.0", help="address to listen on")
    _topic_parser(sub, common)
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
    if not args.metastore:
        ap.error("--metastore (or PULSAR_TXN_METASTORE) is required")
    if args.cmd == "topic":
        return _topic_main(ap, args)
    if args.cmd == "metrics":
        return _metrics_main(args)
    try:
        # only an explicit write may create a namespace: a read (list, show, find,
        # batch), an abort or a sweep of one that does not exist names those that do
        switching = args.cmd == "wire-format" and bool(args.upgrade or args.downgrade)
        store = open_store(args.metastore, namespace=args.namespace, create=switching)
        coord = TransactionCoordinator(store, materialize_inline=True)  # done before exit
        now = store.server_time_ms()
        if args.cmd == "list":
            ids = ([t for t, _ in store.open_txns()] if args.state == "open"
                   else [t for t, _ in store.finalized_txns()])
            headers = [h for h in store.get_headers(ids).values() if h is not None]
            if args.state == "acks-pending":
                headers = [h for h in headers
                           if h.state is TxnState.COMMITTED and h.open_ack_records > 0]
            rows = [_header_dict(h, now) for h in sorted(headers, key=lambda h: h.created_ms)
                    if now - h.created_ms >= args.older_than * 1000]
            _print(rows, args.json)
        elif args.cmd == "show":
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
                print(f"pulsar-txn: {t} is {h.state.value}: only a committed transaction's "
                      "acks are settled (an open one is aborted with 'abort')", file=sys.stderr)
                return 2
            settled = settle_committed_acks(store, t)
            _print([{**_header_dict(coord.get(t), now), "settled_records": settled}],
                   args.json)
        elif args.cmd == "abort":
            h = coord.abort(TxnId.parse(args.txn))
            _print([_header_dict(h, now)], args.json)
        elif args.cmd == "find":
            t = store.find_owner(args.owner)
            if t is None:
                print(f"no transaction recorded for owner {args.owner!r}", file=sys.stderr)
                return 1
            _print([_header_dict(coord.get(t), now)], args.json)
        elif args.cmd == "batch":
            sink = args.sink
            if "/" in sink or sink.startswith("file:") or os.path.isdir(sink):
                sink = sink_id_for_checkpoint(sink)  # the query id in its metadata file
            last, query_id = store.sink_progress(sink)
            t = (store.find_owner(sink_owner(sink, query_id, args.batch_id))
                 if query_id else None)
            if t is None:
                print(f"no transaction recorded for batch {args.batch_id} of sink {sink!r} "
                      f"(collected, or never written); last committed batch: {last}",
                      file=sys.stderr)
                return 1
            row = _header_dict(coord.get(t), now)
            row["sink"], row["batch"] = sink, args.batch_id
            _print([row], args.json)
        elif args.cmd == "wire-format":
            return _wire_format(store, coord, args)
        elif args.cmd == "sweep":
            t0 = time.monotonic()
            done = coord.sweep_all(args.retention_ms)
            _print([{**done,
                     "seconds": round(time.monotonic() - t0, 3)}], args.json)
        return 0
    except PulsarTxnError as e:
        print(f"pulsar-txn: {e}", file=sys.stderr)
        return 2


def _topic_options(defaults: bool) -> argparse.ArgumentParser:
    """``topic``'s own options, accepted after ``topic`` and after its subcommand."""
    p = argparse.ArgumentParser(add_help=False)

    def default(value):
        return value if defaults else argparse.SUPPRESS

    p.add_argument("--service-url", default=default(os.environ.get("PULSAR_TXN_SERVICE_URL")),
                   help="Pulsar service URL; env PULSAR_TXN_SERVICE_URL")
    p.add_argument("--admin-url", default=default(os.environ.get("PULSAR_TXN_ADMIN_URL")),
                   help="Pulsar REST admin URL, to terminate sealed segments (brokers "
                        "without one, like pulsar-lite, fall back to a grace period); "
                        "env PULSAR_TXN_ADMIN_URL")
    p.add_argument("--auth-plugin", default=default(os.environ.get("PULSAR_TXN_AUTH_PLUGIN")),
                   help="Pulsar authentication: token, tls, oauth2 (or the Java class "
                        "name); env PULSAR_TXN_AUTH_PLUGIN")
    p.add_argument("--auth-params", default=default(os.environ.get("PULSAR_TXN_AUTH_PARAMS")),
                   help="its parameters (token:…, file://…, env:VAR; a secret: prefer the "
                        "environment variable PULSAR_TXN_AUTH_PARAMS)")
    p.add_argument("--tls-trust-certs-file",
                   default=default(os.environ.get("PULSAR_TXN_TLS_TRUST_CERTS_FILE")),
                   help="CA bundle for pulsar+ssl:// and https:// (default: the system's); "
                        "env PULSAR_TXN_TLS_TRUST_CERTS_FILE")
    p.add_argument("--tls-validate-hostname", action="store_true",
                   default=default(os.environ.get("PULSAR_TXN_TLS_VALIDATE_HOSTNAME", "")
                                   .lower() in ("1", "true", "yes")),
                   help="check the broker's certificate names its host; env "
                        "PULSAR_TXN_TLS_VALIDATE_HOSTNAME=true")
    return p


def _topic_parser(sub, common: list[argparse.ArgumentParser]) -> None:
    common = [*common, _topic_options(False)]  # the defaults are the top-level parser's
    tp = sub.add_parser("topic", help="scalable topics: create, describe, split, merge, list",
                        parents=common)
    ts = tp.add_subparsers(dest="topic_cmd", required=True)
    c = ts.add_parser("create", help="create a scalable topic with N initial segments",
                      parents=common)
    c.add_argument("name", help="topic://tenant/namespace/name")
    c.add_argument("--segments", type=int, default=1)
    c.add_argument("--hash", choices=["murmur3", "murmur3-low16", "crc32"],
                   default=None,
                   help="how keys map to segments (recorded with the layout): murmur3 "
                        "(upstream Pulsar's v5 rule, the high 16 bits; default), "
                        "murmur3-low16 (upstream's earlier spec), crc32 (earlier releases)")
    d = ts.add_parser("describe", help="segments, ranges, states and entries per segment",
                      parents=common)
    d.add_argument("name")
    s = ts.add_parser("split", help="seal an ACTIVE segment; two children split its range",
                      parents=common)
    s.add_argument("name")
    s.add_argument("segment", type=int)
    s.add_argument("--at", type=lambda v: int(v, 0), default=None,
                   help="first hash of the upper child (default: the middle)")
    m = ts.add_parser("merge", help="seal two adjacent ACTIVE segments; one child covers both",
                      parents=common)
    m.add_argument("name")
    m.add_argument("a", type=int)
    m.add_argument("b", type=int)
    ts.add_parser("list", help="the deployment's scalable topics", parents=common)


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("pulsar-txn")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown (not installed)"


def _pulsar_client(args):
    """A pulsar.Client from the Pulsar options every command shares (authentication,
    TLS trust); returns it with the TLS settings, which the admin calls reuse."""
    import pulsar

    auth = authentication(args.auth_plugin, args.auth_params)
    tls = {"tls_validate_hostname": bool(args.tls_validate_hostname)}
    if args.tls_trust_certs_file:
        tls["tls_trust_certs_file_path"] = args.tls_trust_certs_file
    return pulsar.Client(check_service_url(args.service_url, "--service-url"),
                         logger=quiet_logger(), **tls,
                         **({"authentication": auth} if auth else {})), tls


def _topic_main(ap: argparse.ArgumentParser, args) -> int:
    try:  # only 'topic create' writes: the other subcommands never create a namespace
        store = open_store(args.metastore, namespace=args.namespace,
                           create=args.topic_cmd == "create")
    except PulsarTxnError as e:
        print(f"pulsar-txn: {e}", file=sys.stderr)
        return 2
    if args.topic_cmd == "list":
        for t in store.list_topics():
            print(f"topic://{t}")
        return 0
    if not args.service_url:
        ap.error("topic: --service-url (or PULSAR_TXN_SERVICE_URL) is required")
    try:
        admin_url = check_admin_url(args.admin_url, "--admin-url")  # before any connection
        client, tls = _pulsar_client(args)
    except PulsarTxnError as e:
        store.close()
        print(f"pulsar-txn: {e}", file=sys.stderr)
        return 2
    try:
        topics = ScalableTopics(store, client, admin_url,
                                admin_auth=admin_auth(args.auth_plugin, args.auth_params, tls))
    except PulsarTxnError as e:
        client.close()
        store.close()
        print(f"pulsar-txn: {e}", file=sys.stderr)
        return 2
    try:
        if args.topic_cmd == "create":
            topics.create(args.name, args.segments, args.hash)
        elif args.topic_cmd == "split":
            topics.split(args.name, args.segment, args.at)
        elif args.topic_cmd == "merge":
            topics.merge(args.name, args.a, args.b)
        info = topics.describe(args.name)
        if args.json:
            print(json.dumps(info, indent=2))
        else:
            print(f"{info['topic']}  epoch {info['epoch']}")
            _print([{k: (",".join(map(str, v)) if isinstance(v, list) else v)
                     for k, v in row.items()} for row in info["segments"]], False)
        return 0
    except PulsarTxnError as e:
        print(f"pulsar-txn: {e}", file=sys.stderr)
        return 2
    finally:
        topics.close()
        client.close()
        store.close()


def _metrics_main(args) -> int:
    import threading

    client = None
    if args.service_url:
        try:
            client, _ = _pulsar_client(args)
        except PulsarTxnError as e:
            print(f"pulsar-txn: {e}", file=sys.stderr)
            return 2
    try:
        server, _ = serve(args.metastore, args.namespace, args.port, args.addr, client)
    except PulsarTxnError as e:  # e.g. a namespace that does not exist: named, one line
        print(f"pulsar-txn: {e}", file=sys.stderr)
        return 2
    except OSError as e:  # the port is taken, or the address is not this host's
        print(f"pulsar-txn: metrics serve cannot listen on {args.addr}:{args.port} "
              f"(--addr, --port): {e.strerror or e}", file=sys.stderr)
        return 2
    print(f"serving Prometheus metrics on http://{args.addr}:{args.port}/metrics "
          f"(namespace {args.namespace}); Ctrl-C stops", flush=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        server.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
