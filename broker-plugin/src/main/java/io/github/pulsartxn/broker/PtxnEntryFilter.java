package io.github.pulsartxn.broker;

import com.google.common.collect.MapMaker;
import java.util.concurrent.ConcurrentMap;
import org.apache.bookkeeper.mledger.Entry;
import org.apache.bookkeeper.mledger.Position;
import org.apache.pulsar.broker.service.Subscription;
import org.apache.pulsar.broker.service.persistent.PersistentSubscription;
import org.apache.pulsar.broker.service.plugin.EntryFilter;
import org.apache.pulsar.broker.service.plugin.FilterContext;
import org.apache.pulsar.common.api.proto.CommandSubscribe.SubType;

/**
 * Step 3 of the rule for entries the gate let through: ACCEPT a plain entry or a
 * committed winner's, REJECT one never to be shown (aborted, a losing writer, another
 * deployment, malformed, unknown). REJECT is permanent for the subscription, so it is
 * returned only for a final verdict; an entry whose verdict cannot be read now (the
 * metastore away, a cold cache) is RESCHEDULEd, never rejected. A batch whose messages
 * disagree on the protocol properties is never pulsar-txn's: REJECTed.
 *
 * <p>A RESCHEDULEd entry is a barrier for its subscription: every later entry is
 * RESCHEDULEd too until the barrier is classified (or the subscription's mark-delete
 * passes it). The broker dispatches the rest of a batch around a rescheduled entry;
 * without the barrier a reader or a cumulative ack would move past it and lose it for
 * good, and a later entry of its key would come first. Shared subscriptions keep no
 * order and ack one by one: they get no barrier, and plain entries keep flowing.
 *
 * <p>On Exclusive, Failover and reader subscriptions the broker redelivers a
 * rescheduled entry by rewinding to the mark-delete position: entries received but not
 * yet acknowledged come again, as after a reconnect.
 *
 * <p>The library's own readers and probes (subscriptions named with
 * {@code ptxn.exemptSubscriptionPrefix}) see every entry: they classify themselves.
 */
public class PtxnEntryFilter implements EntryFilter {
    /** The lowest rescheduled position per subscription (weak keys, by identity: a closed
     *  one goes; concurrent: every dispatcher thread reads it for every entry). */
    private final ConcurrentMap<Subscription, Position> barriers = new MapMaker().weakKeys().makeMap();

    @Override
    public FilterResult filterEntry(Entry entry, FilterContext context) {
        Subscription sub = context.getSubscription();
        if (sub == null || context.getMsgMetadata() == null) {
            return FilterResult.ACCEPT;
        }
        String topic = sub.getTopic().getName();
        Verdicts v = Verdicts.of(sub.getTopic().getBrokerService().getPulsar().getConfiguration().getProperties());
        if (!v.config().governs(topic) || sub.getName().startsWith(v.config().exemptPrefix())) {
            return FilterResult.ACCEPT;
        }
        Position at = entry.getPosition();
        Position barrier = barriers.isEmpty() ? null : barriers.get(sub);
        if (barrier != null && at.compareTo(barrier) > 0) {
            if (!passed(sub, barrier)) {
                return FilterResult.RESCHEDULE; // behind an entry not classified yet
            }
            barriers.remove(sub, barrier);
        }
        FilterResult result;
        try {
            Verdict verdict = v.classify(EntryProps.protocolOf(entry, context.getMsgMetadata()), topic);
            result = verdict == Verdict.DELIVER ? FilterResult.ACCEPT
                    : verdict == Verdict.SKIP ? FilterResult.REJECT : FilterResult.RESCHEDULE;
        } catch (EntryProps.Unreadable e) {
            result = FilterResult.REJECT; // final: it never becomes readable
        } catch (Throwable e) {
            v.warn("an entry of " + topic + " could not be classified; it and what follows it "
                    + "on its subscription are rescheduled", e);
            result = FilterResult.RESCHEDULE;
        }
        if (result == FilterResult.RESCHEDULE) {
            if (sub.getType() != SubType.Shared) {
                barriers.merge(sub, at, (was, now) -> now.compareTo(was) < 0 ? now : was);
            }
        } else if (barrier != null && at.equals(barrier)) {
            barriers.remove(sub, barrier); // classified: what follows it may go
        }
        return result;
    }

    /** Whether the subscription moved past the barrier another way (a seek, a skip). */
    private static boolean passed(Subscription sub, Position barrier) {
        return sub instanceof PersistentSubscription ps && ps.getCursor() != null
                && ps.getCursor().getMarkDeletedPosition().compareTo(barrier) >= 0;
    }

    @Override
    public void close() {
    }
}
