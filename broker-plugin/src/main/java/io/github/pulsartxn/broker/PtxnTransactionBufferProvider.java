package io.github.pulsartxn.broker;

import org.apache.pulsar.broker.service.Topic;
import org.apache.pulsar.broker.service.persistent.PersistentTopic;
import org.apache.pulsar.broker.transaction.buffer.TransactionBuffer;
import org.apache.pulsar.broker.transaction.buffer.TransactionBufferProvider;
import org.apache.pulsar.broker.transaction.buffer.impl.TransactionBufferDisable;

/**
 * {@code transactionBufferProviderClassName}: the gate for topics of the governed
 * Pulsar namespaces ({@code ptxn.pulsarNamespaces}), the disabled buffer (no Pulsar v4
 * transactions, no cost) for every other topic. Loaded from the broker's classpath.
 */
public class PtxnTransactionBufferProvider implements TransactionBufferProvider {

    @Override
    public TransactionBuffer newTransactionBuffer(Topic topic) {
        Verdicts v = Verdicts.of(topic.getBrokerService().getPulsar().getConfiguration().getProperties());
        if (topic instanceof PersistentTopic pt && v.config().governs(topic.getName())) {
            return new PtxnTransactionBuffer(pt, v);
        }
        return new TransactionBufferDisable(topic);
    }
}
