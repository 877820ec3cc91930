package io.github.pulsartxn.broker;

import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.Executor;
import java.util.concurrent.atomic.AtomicBoolean;
import org.apache.bookkeeper.mledger.Position;
import org.apache.bookkeeper.mledger.PositionFactory;
import org.apache.pulsar.broker.service.persistent.PersistentTopic;
import org.apache.pulsar.broker.transaction.buffer.impl.TransactionBufferDisable;

/**
 * The gate of one pulsar-txn segment on this broker: its max read position, which every
 * dispatcher (Exclusive, Failover, Shared, Key_Shared, readers, the compactor) honours.
 * It is step 2 of the rule, as the Python readers compute it: the last entry, taken
 * before the open-write index is read, lowered to just below the first entry of any
 * transaction that has not ended; a registration not positioned yet (`!`) may already
 * have appended, so the gate stays where it was until the position is recorded. The
 * gate never moves back, and until the first computation succeeds it is EARLIEST:
 * a broker that cannot reach the metastore delivers nothing of the topic.
 *
 * <p>Pulsar's own (v4) transactions are refused on these topics, as the disabled buffer
 * refuses them: the class extends it and keeps those answers.
 */
public final class PtxnTransactionBuffer extends TransactionBufferDisable {
    private final PersistentTopic topic;
    private final Verdicts verdicts;
    private final String segment;
    private final AtomicBoolean scheduled = new AtomicBoolean();
    private final CompletableFuture<Void> recovered = new CompletableFuture<>();
    private volatile Position gate = PositionFactory.EARLIEST;
    private volatile boolean closed;

    public PtxnTransactionBuffer(PersistentTopic topic, Verdicts verdicts) {
        super(topic);
        this.topic = topic;
        this.verdicts = verdicts;
        this.segment = topic.getName();
        verdicts.register(this);
    }

    @Override
    public Position getMaxReadPosition() {
        return gate; // read by every dispatcher about every 10 ms: no lock, no I/O
    }

    @Override
    public void syncMaxReadPositionForNormalPublish(Position position, boolean isMarker) {
        verdicts.schedule(this);
    }

    @Override
    public CompletableFuture<Void> checkIfTBRecoverCompletely() {
        return recovered;
    }

    @Override
    public CompletableFuture<Void> closeAsync() {
        closed = true;
        recovered.completeExceptionally(new IllegalStateException(segment + ": closed"));
        verdicts.unregister(this);
        return super.closeAsync();
    }

    boolean behind() {
        return !closed && gate.compareTo(topic.getLastPosition()) < 0;
    }

    /** One computation at a time per topic; appends meanwhile ask for another. */
    void schedule(Executor exec) {
        if (!closed && scheduled.compareAndSet(false, true)) {
            exec.execute(() -> {
                scheduled.set(false);
                try {
                    recompute();
                } catch (RuntimeException e) {
                    verdicts.warn("the gate of " + segment + " could not be computed; it holds", e);
                }
            });
        }
    }

    private void recompute() {
        if (closed) {
            return;
        }
        Position last = topic.getLastPosition(); // before the index: H1 covers what is below
        Namespace ns = verdicts.namespace();
        if (ns == null) {
            return; // not created yet, or misconfigured: hold, the tick warns
        }
        Position g = last;
        boolean pending = false;
        for (int p = 0; p < ns.partitions(); p++) {
            List<String> members = verdicts.store().zrange(ns.keys().openWrites(p, segment));
            for (String m : members) {
                String[] f = m.split("\\|", 3);
                long seq = Long.parseLong(f[1]);
                if (verdicts.ended(ns, p, seq)) {
                    continue;
                }
                if (f[0].equals("!")) {
                    pending = true; // may have appended anywhere above the gate: hold it
                    continue;
                }
                long ledger = Long.parseUnsignedLong(f[0].substring(0, 16), 16);
                long entry = Long.parseUnsignedLong(f[0].substring(16, 32), 16);
                Position below = PositionFactory.create(ledger, entry - 1);
                if (below.compareTo(g) < 0) {
                    g = below;
                }
            }
        }
        if (!pending && g.compareTo(gate) > 0) {
            gate = g;
            // what getLastMessageId answers (hasMessageAvailable, the library's own
            // last-entry probes): an entry at or below the gate, never above it. A gate
            // just below a ledger's first entry (L, -1) passes every entry of the ledgers
            // before: the last of those (not answering at all left an older entry, and
            // a reader was told nothing was available while entries were)
            Position answer = g.getEntryId() >= 0 ? g : topic.getManagedLedger().getPreviousPosition(g);
            if (answer != null && answer.getEntryId() >= 0) {
                topic.updateLastDispatchablePosition(answer);
            }
        }
        recovered.complete(null); // the index was read: what the gate is, is known
    }
}
