"""The ``pulsar-txn topic`` commands (create, describe, split, merge, list), and the
output conventions every ``pulsar-txn`` command follows: a refusal is one line on
stderr in the CLI's words (its flags, never the Spark option names the library's
messages use), exit code 2; progress goes to stderr, and only on a terminal.

Kept apart from ``pulsar_txn.cli`` (which builds the parser and runs the transaction
commands) so each file stays readable; ``pulsar_txn.cli.main`` is the entry point.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys

from pulsar_txn.admin import check_admin_url
from pulsar_txn.connection import (
    admin_auth,
    authentication,
    check_service_url,
    quiet_logger,
    shown_url,
)
from pulsar_txn.errors import PulsarTxnError
from pulsar_txn.metastore import open_store
from pulsar_txn.scalable.admin import ScalableTopics

DESCRIBE_TIMEOUT_S = 5  # topic describe: how long one segment's count may wait on the broker
# options named the way the client API and Spark name them -> the CLI's flags
_FLAGS = {"metastore.url": "--metastore", "metastore.namespace": "--namespace",
          "service.url": "--service-url", "admin.url": "--admin-url",
          "pulsar.client.authPluginClassName": "--auth-plugin",
          "pulsar.client.authParams": "--auth-params"}
_OPTION = re.compile(r"(?:option )?'?(" + "|".join(map(re.escape, _FLAGS)) + r"|--[a-z-]+)'?")


def fail(e: Exception | str) -> int:
    """A refusal in one line on stderr, in the CLI's words (its flags, not the Spark
    options the library's messages name); exit code 2."""
    text = _OPTION.sub(lambda m: _FLAGS.get(m.group(1), m.group(1)), " ".join(str(e).split()))
    print(f"pulsar-txn: {text}", file=sys.stderr)
    return 2


def print_table(rows: list[dict]) -> None:
    """Rows as aligned columns: lists as comma lists, None as blank."""
    if not rows:
        print("(none)")
        return
    rows = [{k: "" if v is None else ",".join(map(str, v)) if isinstance(v, list) else v
             for k, v in r.items()} for r in rows]
    cols = list(rows[0])
    widths = {c: max(len(c), *(len(str(r[c])) for r in rows)) for c in cols}
    print("  ".join(c.ljust(widths[c]) for c in cols).rstrip())
    for r in rows:
        print("  ".join(str(r[c]).ljust(widths[c]) for c in cols).rstrip())


class Progress:
    """One status line on stderr, rewritten in place; only when stderr is a terminal
    (stdout, and stderr piped or captured, get nothing of it)."""

    def __init__(self) -> None:
        try:
            self.on = sys.stderr.isatty()
        except (AttributeError, ValueError):
            self.on = False
        self.width = 0

    def __call__(self, text: str) -> None:
        if self.on:
            sys.stderr.write("\r" + text.ljust(self.width))
            sys.stderr.flush()
            self.width = len(text)

    def done(self) -> None:
        if self.on and self.width:
            sys.stderr.write("\r" + " " * self.width + "\r")
            sys.stderr.flush()
            self.width = 0


def topic_options(defaults: bool) -> argparse.ArgumentParser:
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
                   help="CA bundle for pulsar+ssl:// and https:// (the system's if not "
                        "given); env PULSAR_TXN_TLS_TRUST_CERTS_FILE")
    p.add_argument("--tls-validate-hostname", action="store_true",
                   default=default(os.environ.get("PULSAR_TXN_TLS_VALIDATE_HOSTNAME", "")
                                   .lower() in ("1", "true", "yes")),
                   help="check the broker's certificate names its host; env "
                        "PULSAR_TXN_TLS_VALIDATE_HOSTNAME=true")
    return p


def topic_parser(sub, common: list[argparse.ArgumentParser]) -> None:
    common = [*common, topic_options(False)]  # the defaults are the top-level parser's
    tp = sub.add_parser("topic", help="scalable topics: create, describe, split, merge, list",
                        parents=common)
    ts = tp.add_subparsers(dest="topic_cmd", required=True, metavar="COMMAND")
    topic = "topic://tenant/namespace/name"
    c = ts.add_parser("create", help="create a scalable topic with N initial segments",
                      parents=common)
    c.add_argument("name", help=topic)
    c.add_argument("--segments", type=int, default=1, help="initial segments (N)")
    c.add_argument("--hash", choices=["murmur3", "murmur3-low16", "crc32"],
                   default=None,
                   help="how keys map to segments (recorded with the layout): murmur3 "
                        "(upstream Pulsar's v5 rule, the high 16 bits; default), "
                        "murmur3-low16 (upstream's earlier spec), crc32 (earlier releases)")
    d = ts.add_parser("describe", help="segments, ranges, states and entries per segment",
                      parents=common)
    d.add_argument("name", help=topic)
    s = ts.add_parser("split", help="seal an ACTIVE segment; two children split its range",
                      parents=common)
    s.add_argument("name", help=topic)
    s.add_argument("segment", type=int, help="id of the ACTIVE segment to split")
    s.add_argument("--at", type=lambda v: int(v, 0), default=None,
                   help="first hash of the upper child, e.g. 0xc000 (default: the middle)")
    m = ts.add_parser("merge", help="seal two adjacent ACTIVE segments; one child covers both",
                      parents=common)
    m.add_argument("name", help=topic)
    m.add_argument("a", type=int, help="id of one ACTIVE segment")
    m.add_argument("b", type=int, help="id of the ACTIVE segment adjacent to it")
    ts.add_parser("list", help="the deployment's scalable topics", parents=common)


def pulsar_client(args, operation_timeout_s: int = 30):
    """A pulsar.Client from the Pulsar options every command shares (authentication,
    TLS trust); returns it with the TLS settings, which the admin calls reuse."""
    import pulsar

    auth = authentication(args.auth_plugin, args.auth_params)
    tls = {"tls_validate_hostname": bool(args.tls_validate_hostname)}
    if args.tls_trust_certs_file:
        tls["tls_trust_certs_file_path"] = args.tls_trust_certs_file
    return pulsar.Client(check_service_url(args.service_url, "--service-url"),
                         logger=quiet_logger(), operation_timeout_seconds=operation_timeout_s,
                         **tls, **({"authentication": auth} if auth else {})), tls


def topic_main(ap: argparse.ArgumentParser, args) -> int:
    try:  # only 'topic create' writes: the other subcommands never create a namespace
        store = open_store(args.metastore, namespace=args.namespace,
                           create=args.topic_cmd == "create")
    except PulsarTxnError as e:
        return fail(e)
    if args.topic_cmd == "list":
        for t in store.list_topics():
            print(f"topic://{t}")
        return 0
    if not args.service_url:
        ap.error("topic: --service-url (or PULSAR_TXN_SERVICE_URL) is required")
    client = topics = None
    try:
        admin_url = check_admin_url(args.admin_url, "--admin-url")  # before any connection
        client, tls = pulsar_client(
            args, DESCRIBE_TIMEOUT_S if args.topic_cmd == "describe" else 30)
        topics = ScalableTopics(store, client, admin_url, admin_option="--admin-url",
                                admin_auth=admin_auth(args.auth_plugin, args.auth_params, tls))
        return _topic_command(topics, args)
    except PulsarTxnError as e:
        return fail(e)
    finally:
        for closing in (topics, client, store):
            if closing is not None:
                closing.close()


def _topic_command(topics: ScalableTopics, args) -> int:
    """A change (create, split, merge), then the layout and each segment's entries."""
    import pulsar

    try:
        if args.topic_cmd == "create":
            topics.create(args.name, args.segments, args.hash)
        elif args.topic_cmd == "split":
            topics.split(args.name, args.segment, args.at)
        elif args.topic_cmd == "merge":
            topics.merge(args.name, args.a, args.b)
    except pulsar.PulsarException as e:  # raw from pulsar-client: the backing topics
        silent = isinstance(e, (pulsar.Timeout, pulsar.ConnectError))
        return fail(f"the Pulsar broker at {shown_url(args.service_url)} (--service-url) "
                    f"{'did not answer' if silent else 'refused'} {args.topic_cmd} "
                    f"{args.name}: {e}" + ("; check the address and that the broker is up "
                                           "(the layout was not changed)" if silent else ""))
    progress = Progress()
    try:
        info = topics.describe(args.name, progress=progress)
    finally:
        progress.done()
    if args.json:
        print(json.dumps(info, indent=2))
    else:
        print(f"{info['topic']}  epoch {info['epoch']}")
        print_table([{**{k: v for k, v in row.items() if k != "entries_unknown"},
                      "entries": "unknown (no answer)" if row["entries"] is None
                      else row["entries"]} for row in info["segments"]])
    unknown = [r for r in info["segments"] if r["entries"] is None]
    if not unknown:
        return 0
    waited = DESCRIBE_TIMEOUT_S if args.topic_cmd == "describe" else 30
    code = fail(f"entries unknown: the Pulsar broker at {shown_url(args.service_url)} "
                f"(--service-url) did not answer for segment {unknown[0]['id']} within "
                f"{waited} s ({unknown[0]['entries_unknown']}); check the address and that "
                "the broker is up")
    return code if args.topic_cmd == "describe" else 0  # a change made stays made
