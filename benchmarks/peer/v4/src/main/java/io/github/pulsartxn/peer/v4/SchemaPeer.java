package io.github.pulsartxn.peer.v4;

import java.util.concurrent.TimeUnit;
import org.apache.pulsar.client.api.Consumer;
import org.apache.pulsar.client.api.Message;
import org.apache.pulsar.client.api.MessageIdAdv;
import org.apache.pulsar.client.api.Producer;
import org.apache.pulsar.client.api.PulsarClient;
import org.apache.pulsar.client.api.Schema;
import org.apache.pulsar.client.api.SubscriptionInitialPosition;
import org.apache.pulsar.common.schema.KeyValue;
import org.apache.pulsar.common.schema.KeyValueEncodingType;

/**
 * A typed Java client for the schema tests (issue 29): what a Pulsar shop's Java
 * services do with {@code Schema.AVRO(Order.class)}.
 *
 * <pre>
 *   produce SERVICE_URL TOPIC N      sends Order(id=i, name="java-i") for i in 0..N-1
 *   consume SERVICE_URL TOPIC N      prints "id,name" of the first N records, one a line
 *   produce-kv SERVICE_URL TOPIC N INLINE|SEPARATED
 *                                    sends KeyValue(i, Order(i, "java-i")) for i in 0..N-1
 *                                    under Schema.KeyValue(Schema.INT32, Schema.AVRO(Order))
 *   consume-kv SERVICE_URL TOPIC N INLINE|SEPARATED
 *                                    prints "key,id,name" of the first N such records
 *   produce-props SERVICE_URL TOPIC N FIRST K=V...
 *                                    sends Order(id=FIRST+i, name="java-FIRST+i") for i in
 *                                    0..N-1 with the properties K=V (a pulsar-txn append's:
 *                                    the test opened the transaction and registered this
 *                                    writer), then prints "first LEDGER:ENTRY" of the first
 * </pre>
 */
public final class SchemaPeer {
    /** The record, as a Java service defines it (Avro by reflection). */
    public static class Order {
        public int id;
        public String name;

        public Order() {
        }

        Order(int id, String name) {
            this.id = id;
            this.name = name;
        }
    }

    private SchemaPeer() {
    }

    public static void main(String[] args) throws Exception {
        String mode = args[0];
        String topic = args[2];
        int n = Integer.parseInt(args[3]);
        try (PulsarClient client = PulsarClient.builder().serviceUrl(args[1]).build()) {
            if (mode.startsWith("produce-kv") || mode.startsWith("consume-kv")) {
                Schema<KeyValue<Integer, Order>> kv = Schema.KeyValue(Schema.INT32,
                        Schema.AVRO(Order.class), KeyValueEncodingType.valueOf(args[4]));
                if (mode.equals("produce-kv")) {
                    try (Producer<KeyValue<Integer, Order>> p = client.newProducer(kv)
                            .topic(topic).create()) {
                        for (int i = 0; i < n; i++) {
                            p.send(new KeyValue<>(i, new Order(i, "java-" + i)));
                        }
                    }
                    System.out.println("produced " + n);
                    return;
                }
                try (Consumer<KeyValue<Integer, Order>> c = client.newConsumer(kv).topic(topic)
                        .subscriptionName("java-check")
                        .subscriptionInitialPosition(SubscriptionInitialPosition.Earliest)
                        .subscribe()) {
                    for (int i = 0; i < n; i++) {
                        Message<KeyValue<Integer, Order>> m = c.receive(30, TimeUnit.SECONDS);
                        if (m == null) {
                            System.err.println("timed out after " + i + " records");
                            System.exit(3);
                        }
                        KeyValue<Integer, Order> got = m.getValue();
                        Order o = got.getValue();
                        System.out.println(got.getKey() + "," + (o == null ? "null"
                                : o.id + "," + o.name));
                        c.acknowledge(m);
                    }
                }
            } else if (mode.equals("produce-props")) {
                int first = Integer.parseInt(args[4]);
                java.util.Map<String, String> props = new java.util.HashMap<>();
                for (int a = 5; a < args.length; a++) {
                    String[] kv = args[a].split("=", 2);
                    props.put(kv[0], kv[1]);
                }
                try (Producer<Order> p = client.newProducer(Schema.AVRO(Order.class))
                        .topic(topic).enableBatching(false).create()) {
                    MessageIdAdv firstId = null;
                    for (int i = first; i < first + n; i++) {
                        MessageIdAdv id = (MessageIdAdv) p.newMessage().value(
                                new Order(i, "java-" + i)).properties(props).send();
                        if (firstId == null) {
                            firstId = id;
                        }
                    }
                    System.out.println("first " + firstId.getLedgerId() + ":"
                            + firstId.getEntryId());
                }
            } else if (mode.equals("produce")) {
                try (Producer<Order> p = client.newProducer(Schema.AVRO(Order.class))
                        .topic(topic).create()) {
                    for (int i = 0; i < n; i++) {
                        p.send(new Order(i, "java-" + i));
                    }
                }
                System.out.println("produced " + n);
            } else {
                try (Consumer<Order> c = client.newConsumer(Schema.AVRO(Order.class))
                        .topic(topic).subscriptionName("java-check")
                        .subscriptionInitialPosition(SubscriptionInitialPosition.Earliest)
                        .subscribe()) {
                    for (int i = 0; i < n; i++) {
                        Message<Order> m = c.receive(30, TimeUnit.SECONDS);
                        if (m == null) {
                            System.err.println("timed out after " + i + " records");
                            System.exit(3);
                        }
                        Order o = m.getValue();
                        System.out.println(o.id + "," + o.name);
                        c.acknowledge(m);
                    }
                }
            }
        }
    }
}
