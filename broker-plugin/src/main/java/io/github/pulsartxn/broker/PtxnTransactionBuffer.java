package io.github.pulsartxn.broker;

import io.netty.buffer.ByteBuf;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.Executor;
import java.util.concurrent.atomic.AtomicBoolean;
import org.apache.bookkeeper.mledger.Entry;
import org.apache.bookkeeper.mledger.Position;
import org.apache.bookkeeper.mledger.PositionFactory;
import org.apache.pulsar.broker.service.persistent.PersistentTopic;
import org.apache.pulsar.broker.transaction.buffer.impl.TransactionBufferDisable;
import org.apache.pulsar.common.api.proto.MessageMetadata;
import org.apache.pulsar.common.protocol.Commands;

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
 * <p>What {@code getLastMessageId} answers (a reader's {@code hasMessageAvailable}) is the
 * last entry at or below the gate a plain consumer will be given, found by reading back
 * from the gate: an aborted or losing tail would otherwise say "available" for good.
 *
 * <p>Pulsar's own (v4) transactions are refused on these topics, as the disabled buffer
 * refuses them: the class extends it and keeps those answers.
 */
public final class PtxnTransactionBuffer extends TransactionBufferDisable {
    private final PersistentTopic topic;
    private final Verdicts verdicts;
    private final String segment;
    private final AtomicBoolean scheduled = new AtomicBoolean();
    private final AtomicBoolean walking = new AtomicBoolean();
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
            if (g.getEntryId() >= 0) {
                walkBack();
            }
        }
        recovered.complete(null); // the index was read: what the gate is, is known
    }

    /** Entries read back from the gate before giving up and answering the gate itself. */
    static final int WALK_LIMIT = 64;

    /**
     * Moves what getLastMessageId answers to the last entry at or below the gate that is
     * shown (read back from the gate, at most {@link #WALK_LIMIT} entries; beyond that,
     * or on a read error, the gate: "maybe available" is safe, "nothing" when there is
     * something is not). One walk at a time per topic; a gate that moved meanwhile walks
     * again. The answer only moves forward (the broker keeps the greater).
     */
    private void walkBack() {
        if (closed || !walking.compareAndSet(false, true)) {
            return;
        }
        Position from = gate;
        int[] read = {0};
        topic.getManagedLedger().getLastDispatchablePosition(e -> ++read[0] > WALK_LIMIT || shown(e), from)
                .whenComplete((p, err) -> {
                    try {
                        if (err != null || p == null) {
                            topic.updateLastDispatchablePosition(from);
                        } else if (p.getEntryId() >= 0) {
                            topic.updateLastDispatchablePosition(p);
                        }
                    } finally {
                        walking.set(false);
                    }
                    if (gate.compareTo(from) > 0) {
                        walkBack();
                    }
                });
    }

    /** Whether a plain consumer may be given the entry: the filter's rule; an entry
     *  whose verdict cannot be read now counts as shown (it may be). */
    private boolean shown(Entry entry) {
        try {
            ByteBuf buf = entry.getDataBuffer().duplicate();
            Commands.skipBrokerEntryMetadataIfExist(buf);
            MessageMetadata md = Commands.parseMessageMetadata(buf);
            return verdicts.classify(EntryProps.protocolOf(entry, md), segment) != Verdict.SKIP;
        } catch (EntryProps.Unreadable e) {
            return false; // the filter rejects it
        } catch (Throwable e) { // cannot tell now (Redis away, the broker's memory): maybe
            return true;
        }
    }
}
