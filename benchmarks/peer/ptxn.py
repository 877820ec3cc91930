"""pulsar-txn's side of the peer benchmark: the workload of V4Bench/V5Bench through
``pulsar_txn.client.PulsarTxnClient`` (Python), on the 4.0.7 broker the v4 side used.

Same shapes as the Java side: one message per topic (segment) for 1, 8 and 64 topics,
sends positioned before the clock starts, timed ``Transaction.commit()``; commit →
visible to a READ_COMMITTED reader already blocked in ``read_next``; produce throughput
with and without transactions (100-byte values, keys, batching of 1,000 messages / 10
ms, transactions of 1,000 one after another); commits after the written topic was
terminated (plain topic) or the written segment sealed by a split (``topic://``); the
READ_COMMITTED reader's msg/s on committed data; consume-transform-produce (receive,
send one output message, acknowledge the input, all under one transaction committed
every N messages), verified exactly once. Each measure returns a dict or raises; the
driver records a failure and goes on.
"""

from __future__ import annotations

import threading
import time
import uuid

import pulsar

from pulsar_txn.client import PulsarTxnClient, quiet_logger

PAYLOAD = b"x" * 100
NS = "persistent://public/default/"


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def latency(ms: list[float]) -> dict:
    return {"n": len(ms), "p50_ms": round(pct(ms, 0.5), 3), "p99_ms": round(pct(ms, 0.99), 3),
            "mean_ms": round(sum(ms) / len(ms), 3)}


def with_drift(ms: list[float]) -> dict:
    q = max(1, len(ms) // 4)
    return {**latency(ms), "p50_first_quarter_ms": round(pct(ms[:q], 0.5), 3),
            "p50_last_quarter_ms": round(pct(ms[-q:], 0.5), 3)}


def tagged(rep: int) -> bytes:
    """A 100-byte payload naming its repetition (as Stats.tagged on the Java side)."""
    return (b"r%d-" % rep).ljust(100, b"x")


def fresh(base: str) -> str:
    return f"{NS}{base}-{uuid.uuid4().hex[:8]}"


class PulsarTxnBench:
    def __init__(self, broker, metastore_url: str, args) -> None:
        self.broker = broker
        self.args = args
        self.client = PulsarTxnClient(broker.service_url, metastore_url,
                                      namespace=f"peer{uuid.uuid4().hex[:8]}",
                                      admin_url=broker.admin_url)

    def close(self) -> None:
        self.client.close()

    # ------------------------------------------------------------------ commit
    def commit_latency(self) -> dict:
        fanouts, reps, warm = self.args.fanouts, self.args.reps, self.args.warmup
        producers = {f: [self.client.create_producer(fresh(f"ptxn-fan{f}-{i}"),
                                                     batching_enabled=False)
                         for i in range(f)] for f in fanouts}
        lat: dict[int, list[float]] = {f: [] for f in fanouts}
        for r in range(warm + reps):
            for f in fanouts:  # interleaved like the Java side
                txn = self.client.new_transaction(timeout_ms=300_000)
                for p in producers[f]:
                    p.send_async(PAYLOAD, txn=txn)
                txn.flush()  # untimed: every send positioned, as the Java side waits
                t0 = time.perf_counter()
                txn.commit()
                if r >= warm:
                    lat[f].append((time.perf_counter() - t0) * 1e3)
        for ps in producers.values():
            for p in ps:
                p.close()
        out = {str(f): with_drift(lat[f]) for f in fanouts}
        out["unit"] = "plain topics (one segment each), one message each"
        return out

    # ------------------------------------------------------------- visibility
    def visibility(self) -> dict:
        """Tagged messages; the waiting reader skips older ones (counted as seen late); a
        commit not visible within the limit is counted and the next repetition goes on."""
        limit_ms = self.args.visible_timeout_s * 1000
        topic = fresh("ptxn-vis")
        p = self.client.create_producer(topic, batching_enabled=False)
        reader = self.client.create_reader(topic)
        lat, missing, late = [], 0, [0]
        for r in range(self.args.warmup + self.args.reps):
            txn = self.client.new_transaction(timeout_ms=300_000)
            p.send(tagged(r), txn=txn)
            woke: list[float] = []

            def wait(woke=woke, r=r):
                deadline = time.monotonic() + limit_ms / 1000
                while time.monotonic() < deadline:
                    try:
                        m = reader.read_next(max(1, int((deadline - time.monotonic()) * 1000)))
                    except Exception:  # noqa: BLE001 - a read timeout: not visible in time
                        return
                    if m.data() == tagged(r):
                        woke.append(time.perf_counter())
                        return
                    late[0] += 1

            th = threading.Thread(target=wait)
            th.start()
            time.sleep(0.01)  # the reader is now waiting at its gate
            t0 = time.perf_counter()
            txn.commit()
            th.join()
            if not woke:
                missing += 1
            elif r >= self.args.warmup:
                lat.append((woke[0] - t0) * 1e3)
        reader.close()
        p.close()
        return {**(latency(lat) if lat else {}), "commits": self.args.warmup + self.args.reps,
                "not_visible_within_s": self.args.visible_timeout_s, "not_visible": missing,
                "seen_late": late[0]}

    # ------------------------------------------------------------- throughput
    def _produce(self, topic: str, n: int, per_txn: int) -> float:
        p = self.client.create_producer(topic, batching_enabled=True,
                                        batching_max_messages=1000,
                                        batching_max_publish_delay_ms=10,
                                        block_if_queue_full=True, max_pending_messages=10_000)
        t0 = time.perf_counter()
        if per_txn <= 0:
            for i in range(n):
                p.send_async(PAYLOAD, key=str(i))
            p.flush()
        else:
            for start in range(0, n, per_txn):
                txn = self.client.new_transaction(timeout_ms=300_000)
                for i in range(start, min(n, start + per_txn)):
                    p.send_async(PAYLOAD, key=str(i), txn=txn)
                txn.commit()  # flushes this transaction's sends first
        dt = time.perf_counter() - t0
        p.close()
        return dt

    def throughput(self) -> dict:
        n, per_txn = self.args.messages, self.args.per_txn
        self._produce(fresh("ptxn-warm"), min(n, 20_000), 0)
        self._produce(fresh("ptxn-warm"), min(n, 20_000), per_txn)
        plain = txn = float("inf")
        self.txn_topic = ""
        for _ in range(2):  # alternating, best of two each (as the Java side)
            plain = min(plain, self._produce(fresh("ptxn-tp-plain"), n, 0))
            topic = fresh("ptxn-tp-txn")
            t = self._produce(topic, n, per_txn)
            if t < txn:
                txn, self.txn_topic = t, topic
        return {"messages": n, "messages_per_txn": per_txn,
                "plain_msgs_per_s": round(n / plain), "txn_msgs_per_s": round(n / txn),
                "ratio_txn_over_plain": round(plain / txn, 3)}

    def reader_throughput(self) -> dict:
        """READ_COMMITTED reader over the committed data of the throughput run."""
        n = self.args.messages
        topic = getattr(self, "txn_topic", "") or fresh("ptxn-rd")
        if not getattr(self, "txn_topic", ""):
            self._produce(topic, n, self.args.per_txn)

        def read() -> float:
            r = self.client.create_reader(topic)
            t0 = time.perf_counter()
            for _ in range(n):
                r.read_next(10_000).data()
            dt = time.perf_counter() - t0
            r.close()
            return dt

        best = min(read() for _ in range(2))
        return {"messages": n, "read_committed_msgs_per_s": round(n / best)}

    # ------------------------------------------------------- terminated/sealed
    def _commit_outcome(self, txn) -> dict:
        t0 = time.perf_counter()
        try:
            txn.commit()
            outcome = "committed"
        except Exception as e:  # noqa: BLE001 - reported, not raised: it is the figure
            outcome = f"failed: {type(e).__name__}: {e}"
        return {"outcome": outcome, "commit_ms": round((time.perf_counter() - t0) * 1e3, 3),
                "state_after": str(txn.state.value if hasattr(txn.state, "value")
                                   else txn.state)}

    def _visible(self, topic: str) -> dict:
        r = self.client.create_reader(topic)
        t0 = time.perf_counter()
        try:
            r.read_next(self.args.visible_timeout_s * 1000)
            return {"visible_after": True,
                    "visible_after_ms": round((time.perf_counter() - t0) * 1e3, 3)}
        except Exception:  # noqa: BLE001 - a timeout: nothing visible
            return {"visible_after": False, "visible_after_ms": None}
        finally:
            r.close()

    def after_terminate(self) -> dict:
        runs = []
        for _ in range(self.args.sealed_reps):
            topic = fresh("ptxn-term")
            p = self.client.create_producer(topic, batching_enabled=False)
            txn = self.client.new_transaction(timeout_ms=300_000)
            p.send(PAYLOAD, txn=txn)
            self.broker.terminate_topic(topic)
            run = self._commit_outcome(txn)
            run.update(self._visible(topic))
            p.close()
            runs.append(run)
        return {"runs": runs,
                "fence": "topic terminated (admin) after the write, before the commit"}

    def after_seal(self) -> dict:
        runs = []
        for _ in range(self.args.sealed_reps):
            name = f"topic://public/default/ptxn-seal-{uuid.uuid4().hex[:8]}"
            lay = self.client.scalable.create(name, segments=1)
            seg = lay.active()[0].id
            p = self.client.create_producer(name)
            txn = self.client.new_transaction(timeout_ms=300_000)
            p.send(PAYLOAD, key="k", txn=txn)
            self.client.scalable.split(name, seg)
            run = self._commit_outcome(txn)
            run.update(self._visible(name))
            p.close()
            runs.append(run)
        return {"runs": runs,
                "fence": "segment sealed by a split (and its backing topic terminated) after "
                         "the write, before the commit"}

    # ------------------------------------------------ consume-transform-produce
    def _fill(self, topic: str, n: int) -> None:
        """The input: n plain messages, values ``in-<i>`` (unique, 100 bytes), batched."""
        p = self.client.create_producer(topic, batching_enabled=True,
                                        batching_max_messages=1000,
                                        batching_max_publish_delay_ms=10,
                                        block_if_queue_full=True, max_pending_messages=10_000)
        for i in range(n):
            p.send_async(ctp_value(b"in", i), key=str(i))
        p.flush()
        p.close()

    def _ctp_once(self, n: int, per_txn: int) -> dict:
        src, dst, sub = fresh("ptxn-ctp-in"), fresh("ptxn-ctp-out"), "ctp"
        self._fill(src, n)
        consumer = self.client.subscribe(src, sub)
        out = self.client.create_producer(dst, batching_enabled=True,
                                          batching_max_messages=1000,
                                          batching_max_publish_delay_ms=10,
                                          block_if_queue_full=True,
                                          max_pending_messages=10_000)
        lat: list[float] = []
        t0 = time.perf_counter()
        txn = None
        for i in range(n):
            if txn is None:
                txn = self.client.new_transaction(timeout_ms=300_000)
            m = consumer.receive(10_000)
            out.send_async(b"out" + m.data()[2:], key=m.key, txn=txn)
            consumer.acknowledge_async(m, txn=txn)  # as the Java side's acknowledgeAsync
            if (i + 1) % per_txn == 0 or i + 1 == n:
                c0 = time.perf_counter()
                txn.commit()  # flushes this transaction's sends first
                lat.append((time.perf_counter() - c0) * 1e3)
                txn = None
        dt = time.perf_counter() - t0
        out.close()
        consumer.close()
        return {"messages": n, "messages_per_txn": per_txn, "msgs_per_s": round(n / dt),
                "commits": len(lat), **{k: v for k, v in latency(lat).items() if k != "n"},
                **self._ctp_verify(src, sub, dst, n)}

    def _ctp_verify(self, src: str, sub: str, dst: str, n: int) -> dict:
        """Output: every input value once (a READ_COMMITTED reader); input: nothing left
        on the subscription (a new consumer of it receives nothing)."""
        seen: dict[int, int] = {}
        r = self.client.create_reader(dst)
        try:
            while True:
                try:
                    m = r.read_next(2_000 if len(seen) >= n else 10_000)
                except Exception:  # noqa: BLE001 - a read timeout: the end
                    break
                i = ctp_index(m.data())
                seen[i] = seen.get(i, 0) + 1
        finally:
            r.close()
        # the input's cursor as the broker has it: a plain pulsar-client consumer (ours
        # would ack again what a tombstone covers, hiding an ack that never arrived)
        again = 0
        plain = pulsar.Client(self.broker.service_url, logger=quiet_logger())
        try:
            c = plain.subscribe(src, sub)
            while True:
                try:
                    c.receive(2_000)
                    again += 1
                except pulsar.Timeout:  # nothing left
                    break
        finally:
            plain.close()
        return ctp_verdict(n, seen, again)

    def consume_transform_produce(self) -> dict:
        res: dict = {"unit": "one plain input topic (subscription, Exclusive), one output "
                             "topic; per input: receive, send one output message and "
                             "acknowledge the input under the transaction"}
        self._ctp_once(min(self.args.messages, 5_000), 100)  # warm-up
        for per_txn, n in ctp_plan(self.args.messages):
            res[str(per_txn)] = self._ctp_once(n, per_txn)
        return res


def ctp_plan(messages: int) -> list[tuple[int, int]]:
    """(messages per transaction, input messages): commits of one are slow everywhere."""
    return [(1, max(20, messages // 100)), (100, max(200, messages // 4)), (1000, messages)]


def ctp_value(prefix: bytes, i: int) -> bytes:
    return (prefix + b"-%d-" % i).ljust(100, b"x")


def ctp_index(data: bytes) -> int:
    return int(data.split(b"-", 2)[1])


def ctp_verdict(n: int, seen: dict[int, int], again: int) -> dict:
    """Exactly once: each of the n inputs in the output once, none left on the input."""
    missing = sum(1 for i in range(n) if i not in seen)
    dups = sum(c - 1 for c in seen.values() if c > 1)
    unexpected = sum(1 for i in seen if not 0 <= i < n)
    return {"output_missing": missing, "output_duplicates": dups,
            "output_unexpected": unexpected, "input_redelivered": again,
            "exactly_once": missing == dups == unexpected == again == 0}
