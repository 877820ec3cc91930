package io.github.pulsartxn.peer.v4;

import java.nio.charset.StandardCharsets;
import java.time.Instant;
import java.util.concurrent.TimeUnit;
import org.apache.pulsar.client.api.Consumer;
import org.apache.pulsar.client.api.Message;
import org.apache.pulsar.client.api.PulsarClient;
import org.apache.pulsar.client.api.SubscriptionInitialPosition;
import org.apache.pulsar.client.api.SubscriptionType;

/**
 * A plain Java consumer that knows nothing of pulsar-txn, for the broker plugin's tests
 * (issue 28): what a company's Java services reading a pulsar-txn topic are.
 *
 * <pre>
 *   consume SERVICE_URL TOPIC TYPE N MAX_MS
 *       subscribes (TYPE: Exclusive, Failover, Shared, Key_Shared) from the earliest
 *       message, prints "ready", then "msg PAYLOAD" for each message as it arrives (acked),
 *       until N arrived and one more second passed, or MAX_MS; stdout is flushed per line
 *   tail SERVICE_URL TOPIC N MAX_MS
 *       the same on an Exclusive subscription, each line "msg PAYLOAD EPOCH_MICROS" with
 *       the wall-clock time the message arrived (the broker plugin's benchmark: commit
 *       -> visible to a plain Java consumer, against the committer's clock on this host)
 * </pre>
 */
public final class PlainPeer {
    private PlainPeer() {
    }

    public static void main(String[] args) throws Exception {
        boolean tail = args.length == 5 && args[0].equals("tail");
        if (!tail && (args.length != 6 || !args[0].equals("consume"))) {
            System.err.println("usage: consume SERVICE_URL TOPIC TYPE N MAX_MS | tail SERVICE_URL TOPIC N MAX_MS");
            System.exit(2);
        }
        String type = tail ? "Exclusive" : args[3];
        int want = Integer.parseInt(args[tail ? 3 : 4]);
        long deadline = System.currentTimeMillis() + Long.parseLong(args[tail ? 4 : 5]);
        try (PulsarClient client = PulsarClient.builder().serviceUrl(args[1]).build();
             Consumer<byte[]> consumer = client.newConsumer().topic(args[2])
                     .subscriptionName("plain-java").subscriptionType(SubscriptionType.valueOf(type))
                     .subscriptionInitialPosition(SubscriptionInitialPosition.Earliest).subscribe()) {
            System.out.println("ready");
            System.out.flush();
            int got = 0;
            long until = deadline;
            while (System.currentTimeMillis() < until) {
                Message<byte[]> m = consumer.receive(100, TimeUnit.MILLISECONDS);
                if (m == null) {
                    continue;
                }
                String at = "";
                if (tail) {
                    Instant now = Instant.now();
                    at = " " + (now.getEpochSecond() * 1_000_000L + now.getNano() / 1_000);
                }
                consumer.acknowledge(m);
                System.out.println("msg " + new String(m.getData(), StandardCharsets.UTF_8) + at);
                System.out.flush();
                if (++got == want) {
                    until = Math.min(deadline, System.currentTimeMillis() + 1000);
                }
            }
        }
    }
}
