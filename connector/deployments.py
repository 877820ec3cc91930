"""Entries of another deployment: told apart from malformed ones, never passed silently.

Every transactional append carries its deployment id (``records.PROP_TXN``). A reader
meets another deployment's entries when ``metastore.namespace`` or ``metastore.url``
names the wrong deployment, or after the metastore was reset: their transactions are
not in this store, so they are never delivered. Skipping them silently would lose them
for good (a Spark query commits offsets past them, a consumer acks them), so by default
the reader raises :class:`ForeignDeploymentEntries`, naming the ids seen; the reader's
explicit option (``skip_foreign_deployments``, ``read.foreignDeployments=skip``) passes
them over, counted. A malformed property (hole 9) is skipped as before: it names no
deployment that could hold it.
"""

from __future__ import annotations

from collections.abc import Iterable

from pulsar_txn.errors import ForeignDeploymentEntries, InvalidTxnId
from pulsar_txn.records import PROP_DEPLOYMENT, PROP_TXN, PROP_WRITER, TAG_SEP, TxnId

SKIP_OPTION = "read.foreignDeployments"  # the Spark source's option (fail | skip)
CLIENT_OPTION = "skip_foreign_deployments"  # PulsarTxnClient's argument


def foreign_deployment(props: dict, deployment: str) -> str | None:
    """The deployment id of a well-formed transactional entry written under another
    deployment than ``deployment``; None for a plain, own, or malformed entry."""
    tag = props.get(PROP_TXN)
    if tag is None:
        return None
    if TAG_SEP in tag:
        parts = tag.split(TAG_SEP)
        if len(parts) != 3 or PROP_WRITER in props or PROP_DEPLOYMENT in props:
            return None
        txn, writer, dep = parts
    else:
        txn, writer, dep = tag, props.get(PROP_WRITER, ""), props.get(PROP_DEPLOYMENT)
    if not dep or dep == deployment or not writer:
        return None
    try:
        TxnId.parse(txn)
    except InvalidTxnId:
        return None
    return dep


def foreign_entries_error(where: str, seen: Iterable[str], deployment: str, namespace: str,
                          option: str) -> ForeignDeploymentEntries:
    """The error a reader raises at another deployment's entries (``option``: how to
    skip them, in the caller's API)."""
    ids = tuple(sorted(set(seen)))
    return ForeignDeploymentEntries(
        f"{where}: transactional entries of another deployment ({', '.join(map(repr, ids))}) "
        f"than this reader's ({deployment!r}, namespace {namespace!r}): their transactions "
        "are not in this metastore, so they are never delivered. Check options "
        "'metastore.url' and 'metastore.namespace' (the writers' values); after a "
        f"deliberate metastore reset, set {option} to skip such entries (counted)", ids)
