package io.github.pulsartxn.broker;

import org.apache.bookkeeper.mledger.Entry;
import org.apache.pulsar.broker.service.Subscription;
import org.apache.pulsar.broker.service.plugin.EntryFilter;
import org.apache.pulsar.broker.service.plugin.FilterContext;

/**
 * Step 3 of the rule for entries the gate let through: ACCEPT a plain entry or a
 * committed winner's, REJECT one never to be shown (aborted, a losing writer, another
 * deployment, malformed, unknown). REJECT is permanent for the subscription, so it is
 * returned only for a final verdict; an entry whose verdict cannot be read now (the
 * metastore away, a cold cache) is RESCHEDULEd, never rejected. A batch whose messages
 * disagree on the protocol properties is never pulsar-txn's: REJECTed.
 *
 * <p>The library's own readers and probes (subscriptions named with
 * {@code ptxn.exemptSubscriptionPrefix}) see every entry: they classify themselves.
 */
public class PtxnEntryFilter implements EntryFilter {

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
        try {
            Verdict verdict = v.classify(EntryProps.protocolOf(entry, context.getMsgMetadata()), topic);
            if (verdict == Verdict.DELIVER) {
                return FilterResult.ACCEPT;
            }
            return verdict == Verdict.SKIP ? FilterResult.REJECT : FilterResult.RESCHEDULE;
        } catch (EntryProps.Unreadable e) {
            return FilterResult.REJECT; // final: it never becomes readable
        } catch (Throwable e) {
            v.warn("an entry of " + topic + " could not be classified; rescheduled", e);
            return FilterResult.RESCHEDULE;
        }
    }

    @Override
    public void close() {
    }
}
