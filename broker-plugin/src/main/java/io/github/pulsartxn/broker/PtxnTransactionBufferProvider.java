package io.github.pulsartxn.broker;

import java.io.IOException;
import java.io.UncheckedIOException;
import org.apache.pulsar.broker.service.Topic;
import org.apache.pulsar.broker.service.persistent.PersistentTopic;
import org.apache.pulsar.broker.transaction.buffer.TransactionBuffer;
import org.apache.pulsar.broker.transaction.buffer.TransactionBufferProvider;
import org.apache.pulsar.broker.transaction.buffer.impl.TransactionBufferDisable;

/**
 * {@code transactionBufferProviderClassName}: the gate for topics of the governed
 * Pulsar namespaces ({@code ptxn.pulsarNamespaces}); every other topic gets the provider
 * named by {@code ptxn.delegateProvider} (e.g. the broker's default,
 * {@code org.apache.pulsar.broker.transaction.buffer.impl.TopicTransactionBufferProvider},
 * to keep Pulsar's own transactions working there), or by default the disabled buffer
 * (no Pulsar transactions, no cost). Loaded from the broker's classpath.
 */
public class PtxnTransactionBufferProvider implements TransactionBufferProvider {
    public static final String DELEGATE = "ptxn.delegateProvider";
    private volatile TransactionBufferProvider delegate;

    @Override
    public TransactionBuffer newTransactionBuffer(Topic topic) {
        var props = topic.getBrokerService().getPulsar().getConfiguration().getProperties();
        Verdicts v = Verdicts.of(props);
        if (topic instanceof PersistentTopic pt && v.config().governs(topic.getName())) {
            return new PtxnTransactionBuffer(pt, v);
        }
        String other = props.getProperty(DELEGATE, "").strip();
        if (other.isEmpty()) {
            return new TransactionBufferDisable(topic);
        }
        TransactionBufferProvider d = delegate;
        if (d == null) {
            try {
                d = delegate = TransactionBufferProvider.newProvider(other);
            } catch (IOException e) {
                throw new UncheckedIOException(DELEGATE + " " + other + " cannot be loaded", e);
            }
        }
        return d.newTransactionBuffer(topic);
    }
}
