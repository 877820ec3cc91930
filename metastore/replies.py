"""How Redis's answers become the store boundary's typed values and errors.

Why in one place: the roles above the store (coordinator, buffer, pending acks,
scalable topics) must work on any backend, so no Redis exception, status string
or hash layout may reach them. Everything the Redis store returns or raises goes
through here: transport failures (retriable), refusals (not: repeating a script
error cannot help), the scripts' status replies, and the header hash.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from functools import wraps
from typing import TypeVar

import redis

from pulsar_txn.errors import (
    MetastoreError,
    MetastoreUnavailable,
    PulsarTxnError,
    TxnNotFound,
    TxnNotOpen,
    TxnTimedOut,
)
from pulsar_txn.records import TxnHeader, TxnId
from pulsar_txn.state import TxnState

from .base import Collected, LayoutVerdict, Materialized

F = TypeVar("F", bound=Callable)

# a server that is loading or failing over answers with these: it will be ready
NOT_READY = ("BUSY", "LOADING", "TRYAGAIN", "MASTERDOWN", "CLUSTERDOWN", "MOVED", "ASK",
             "READONLY")  # READONLY: a primary demoted by a failover, until the client moves
# a Redis Cluster between owners (failover, slot move) after the client's own retries
CLUSTER_UNAVAILABLE = (redis.exceptions.ClusterDownError, redis.exceptions.TryAgainError,
                       redis.exceptions.AskError, redis.exceptions.SlotNotCoveredError)


def translate(fn: F) -> F:
    """Map Redis failures to the store's errors at the boundary."""

    @wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except PulsarTxnError:
            raise
        except (redis.ConnectionError, redis.TimeoutError, *CLUSTER_UNAVAILABLE) as e:
            where = getattr(args[0], "url", "?") if args else "?"
            raise MetastoreUnavailable(f"metadata store {where!r} (option 'metastore.url') "
                                       f"unreachable: {e}") from e
        except (redis.exceptions.CrossSlotTransactionError,
                redis.exceptions.ClusterCrossSlotError) as e:  # keys of two slots: a bug
            where = getattr(args[0], "url", "?") if args else "?"
            raise MetastoreError(f"metadata store {where!r} (option 'metastore.url') refused "
                                 f"the request: {e}") from e
        except (redis.exceptions.RedisClusterException, redis.exceptions.ClusterError) as e:
            where = getattr(args[0], "url", "?") if args else "?"
            if "same key slot" in str(e) or "same slot" in str(e):  # redis-py's own check
                raise MetastoreError(f"metadata store {where!r} (option 'metastore.url') "
                                     f"refused the request: {e}") from e
            # no reachable node, no slot map, or too many redirections during a move
            where = getattr(args[0], "url", "?") if args else "?"
            raise MetastoreUnavailable(f"metadata store {where!r} (option 'metastore.url') "
                                       f"unreachable: {e}") from e
        except redis.ResponseError as e:
            # A script error or a rejected command: repeating it cannot help (a
            # server that is still loading or a failover in progress is a
            # ConnectionError above, or BUSY/LOADING/TRYAGAIN here).
            where = getattr(args[0], "url", "?") if args else "?"
            if str(e).split(" ", 1)[0] in NOT_READY:
                raise MetastoreUnavailable(f"metadata store {where!r} (option 'metastore.url') "
                                           f"is not ready: {e}") from e
            raise MetastoreError(f"metadata store {where!r} (option 'metastore.url') refused "
                                 f"the request: {e}") from e

    return wrapper  # type: ignore[return-value]


# The scripts' status replies, as the boundary's typed answers.
MATERIALIZED = {"OK": Materialized.DONE, "ALREADY": Materialized.ALREADY,
                "GONE": Materialized.GONE, "OPEN": Materialized.OPEN}
COLLECTED = {"OK": Collected.DONE, "KEPT": Collected.KEPT, "GONE": Collected.GONE,
             "OPEN": Collected.OPEN, "UNMATERIALIZED": Collected.UNMATERIALIZED,
             "YOUNG": Collected.YOUNG, "ACKS_PENDING": Collected.ACKS_PENDING,
             "UNFSYNCED": Collected.UNFSYNCED}
LAYOUT = {"OK": LayoutVerdict.APPLIED, "STALE": LayoutVerdict.STALE,
          "NOTFOUND": LayoutVerdict.NOT_FOUND, "NOTACTIVE": LayoutVerdict.NOT_ACTIVE}


def raise_txn_status(txn_id: TxnId, res: list) -> None:
    """The typed error of a write/ack script's refusal (returns on any other reply)."""
    status = res[0]
    if status == "NOTFOUND":
        raise TxnNotFound(f"transaction {txn_id} not found")
    if status == "NOTOPEN":
        raise TxnNotOpen(str(txn_id), res[1])
    if status == "TIMEDOUT":
        raise TxnTimedOut(str(txn_id))
    if status == "NOTREG":
        raise PulsarTxnError(f"transaction {txn_id}: write recorded before registration")


def header_from(txn_id: TxnId, h: dict[str, str]) -> TxnHeader:
    """A header hash (create_txn.lua, end_txn.lua name its fields) as a TxnHeader."""
    win = h.get("win") or "[]"
    return TxnHeader(
        txn_id=txn_id,
        state=TxnState(h["st"]),
        deadline_ms=int(h.get("dl", 0)),
        created_ms=int(h.get("cr", 0)),
        finalized_ms=int(h["fin"]) if h.get("fin") else None,
        owner=h.get("own", ""),
        winners=frozenset(json.loads(win)),
        open_ack_records=int(h.get("ao", 0)),
        schema_version=int(h.get("v", 1)),
    )
