package io.github.pulsartxn.peer.v4;

import io.github.pulsartxn.peer.Args;
import io.github.pulsartxn.peer.Results;
import io.github.pulsartxn.peer.Stats;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.UUID;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.pulsar.client.admin.PulsarAdmin;
import org.apache.pulsar.client.api.Consumer;
import org.apache.pulsar.client.api.Message;
import org.apache.pulsar.client.api.MessageId;
import org.apache.pulsar.client.api.MessageRouter;
import org.apache.pulsar.client.api.MessageRoutingMode;
import org.apache.pulsar.client.api.Producer;
import org.apache.pulsar.client.api.ProducerBuilder;
import org.apache.pulsar.client.api.PulsarClient;
import org.apache.pulsar.client.api.Reader;
import org.apache.pulsar.client.api.Schema;
import org.apache.pulsar.client.api.SubscriptionInitialPosition;
import org.apache.pulsar.client.api.SubscriptionType;
import org.apache.pulsar.client.api.TopicMetadata;
import org.apache.pulsar.client.api.transaction.Transaction;

/**
 * Apache Pulsar v4 transactions (Java client 4.0.x) on a 4.0.x broker with
 * {@code transactionCoordinatorEnabled=true}; also the plain Java producer and reader
 * (no transactions) as the broker's delivery limit.
 *
 * <p>Measures (each independent; one that fails is reported and the rest still run):
 * commit latency for a transaction that wrote one message to each of 1, 8 and 64
 * partitions (sends acknowledged before the clock starts; timed: {@code commit().get()});
 * commit → visible to a reader already blocked in {@code readNext()}; produce throughput
 * with and without transactions (same 100-byte values with keys, same batching;
 * transactions of {@code --per-txn} messages, one after another); a commit after the
 * topic the transaction wrote to was terminated; plain producer and reader msg/s.
 */
public final class V4Bench {
    /** Where its topics go ({@code --namespace}, default public/default: the broker
     *  plugin's benchmark points it at a namespace the plugin does not govern). */
    private final String ns;

    private final Args args;
    private final PulsarClient client;      // transactions enabled
    private final PulsarClient plainClient; // the delivery limit: no transaction support
    private final PulsarAdmin admin;
    private final byte[] payload = new byte[100];

    private V4Bench(Args args) throws Exception {
        this.args = args;
        this.ns = "persistent://" + args.str("namespace", "public/default") + "/";
        String url = args.str("service-url");
        this.client = PulsarClient.builder().serviceUrl(url).enableTransaction(true)
                .operationTimeout(30, TimeUnit.SECONDS).build();
        this.plainClient = PulsarClient.builder().serviceUrl(url).build();
        this.admin = PulsarAdmin.builder().serviceHttpUrl(args.str("admin-url")).build();
        java.util.Arrays.fill(payload, (byte) 'x');
    }

    public static void main(String[] argv) throws Exception {
        Args args = Args.parse(argv);
        Map<String, Object> ctx = new LinkedHashMap<>();
        ctx.put("client", "pulsar-client-original " + args.str("client-version", "4.0.7"));
        Results out = new Results("pulsar-v4", ctx);
        V4Bench b;
        try {
            b = new V4Bench(args);
        } catch (Throwable t) {
            out.put("setup", Results.error(t));
            out.print();
            return;
        }
        try {
            b.run(out);
        } finally {
            out.print();
            b.close();
        }
        System.exit(0);  // the TC client's timers are not all daemon threads
    }

    private void run(Results out) {
        int reps = args.integer("reps", 200);
        int warm = args.integer("warmup", 20);
        int n = args.integer("messages", 200_000);
        int perTxn = args.integer("per-txn", 1000);
        // visibility on a quiet broker, then the commit-latency burst, then visibility
        // again right after it (PIP-473 on 5.0.0-M1 lags after such a burst)
        if (args.wants("visible")) {
            out.measure("commit_to_visible", () -> visibility(reps, warm));
        }
        if (args.wants("commit")) {
            out.measure("commit_latency", () -> commitLatency(fanouts(), reps, warm));
        }
        if (args.wants("visible")) {
            out.measure("commit_to_visible_after_burst", () -> visibility(reps, warm));
        }
        if (args.wants("throughput")) {
            out.measure("produce_throughput", () -> throughput(n, perTxn));
        }
        if (args.wants("plain")) {
            out.measure("delivery_limit", () -> deliveryLimit(n));
        }
        if (args.wants("ctp")) {
            out.measure("consume_transform_produce", () -> consumeTransformProduce(n));
        }
        if (args.wants("sealed")) {
            out.measure("commit_after_terminate", () -> afterTerminate(
                    args.integer("sealed-reps", 3), args.integer("sealed-timeout-s", 60)));
        }
    }

    private int[] fanouts() {
        String[] s = args.str("fanouts", "1,8,64").split(",");
        int[] f = new int[s.length];
        for (int i = 0; i < s.length; i++) {
            f[i] = Integer.parseInt(s[i].trim());
        }
        return f;
    }

    private String fresh(String base) {
        return ns + base + "-" + UUID.randomUUID().toString().substring(0, 8);
    }

    private Transaction newTxn() throws Exception {
        return client.newTransaction().withTransactionTimeout(5, TimeUnit.MINUTES).build()
                .get(30, TimeUnit.SECONDS);
    }

    /** Routes each message to the partition named in its "p" property. */
    private static final class ByProperty implements MessageRouter {
        @Override
        public int choosePartition(Message<?> msg, TopicMetadata metadata) {
            return Integer.parseInt(msg.getProperty("p"));
        }
    }

    private Map<String, Object> commitLatency(int[] fanouts, int reps, int warm) throws Exception {
        Map<Integer, Producer<byte[]>> producers = new LinkedHashMap<>();
        Map<Integer, List<Double>> lat = new LinkedHashMap<>();
        for (int f : fanouts) {
            String topic = fresh("v4-fan" + f);
            admin.topics().createPartitionedTopic(topic, f);
            producers.put(f, client.newProducer(Schema.BYTES).topic(topic)
                    .enableBatching(false).sendTimeout(0, TimeUnit.SECONDS)
                    .messageRoutingMode(MessageRoutingMode.CustomPartition)
                    .messageRouter(new ByProperty()).create());
            lat.put(f, new ArrayList<>());
        }
        for (int r = 0; r < warm + reps; r++) {
            for (int f : fanouts) {  // interleaved, so drift hits every case alike
                Producer<byte[]> p = producers.get(f);
                Transaction txn = newTxn();
                List<CompletableFuture<MessageId>> sends = new ArrayList<>();
                for (int i = 0; i < f; i++) {
                    sends.add(p.newMessage(txn).property("p", Integer.toString(i))
                            .value(payload).sendAsync());
                }
                CompletableFuture.allOf(sends.toArray(new CompletableFuture[0]))
                        .get(30, TimeUnit.SECONDS);
                long t0 = System.nanoTime();
                txn.commit().get(60, TimeUnit.SECONDS);
                if (r >= warm) {
                    lat.get(f).add(Stats.msSince(t0));
                }
            }
        }
        Map<String, Object> res = new LinkedHashMap<>();
        for (int f : fanouts) {
            res.put(Integer.toString(f), Stats.latencyWithDrift(lat.get(f)));
            producers.get(f).close();
        }
        res.put("unit", "partitions of one partitioned topic, one message each");
        return res;
    }

    /**
     * Each repetition's message names the repetition; the waiting reader skips older ones
     * (a message that showed up only after a later commit counts as seen late). A commit
     * whose message is not visible within {@code --visible-timeout-s} is counted, not
     * fatal: the next repetition goes on.
     */
    private Map<String, Object> visibility(int reps, int warm) throws Exception {
        int limitS = args.integer("visible-timeout-s", 10);
        String topic = fresh("v4-vis");
        Producer<byte[]> p = client.newProducer(Schema.BYTES).topic(topic)
                .enableBatching(false).sendTimeout(0, TimeUnit.SECONDS).create();
        Reader<byte[]> reader = client.newReader(Schema.BYTES).topic(topic)
                .startMessageId(MessageId.earliest).create();
        ExecutorService waiter = Executors.newSingleThreadExecutor();
        List<Double> lat = new ArrayList<>();
        AtomicInteger late = new AtomicInteger();
        int missing = 0;
        try {
            for (int r = 0; r < warm + reps; r++) {
                final int rep = r;
                Transaction txn = newTxn();
                p.newMessage(txn).value(Stats.tagged(rep)).send();
                Future<Long> woke = waiter.submit(() -> {
                    while (true) {
                        Message<byte[]> m = reader.readNext(limitS, TimeUnit.SECONDS);
                        if (m == null) {
                            return -1L;
                        }
                        if (Stats.isTagged(m.getData(), rep)) {
                            return System.nanoTime();
                        }
                        late.incrementAndGet();
                    }
                });
                Thread.sleep(10);  // the reader is now waiting
                long t0 = System.nanoTime();
                txn.commit().get(60, TimeUnit.SECONDS);
                long t1 = woke.get(limitS + 30, TimeUnit.SECONDS);
                if (t1 < 0) {
                    missing++;
                } else if (r >= warm) {
                    lat.add((t1 - t0) / 1e6);
                }
            }
        } finally {
            waiter.shutdownNow();
            reader.close();
            p.close();
        }
        Map<String, Object> m = lat.isEmpty() ? new LinkedHashMap<>() : Stats.latency(lat);
        m.put("commits", warm + reps);
        m.put("not_visible_within_s", limitS);
        m.put("not_visible", missing);
        m.put("seen_late", late.get());
        return m;
    }

    private ProducerBuilder<byte[]> batched(PulsarClient c, String topic) {
        return c.newProducer(Schema.BYTES).topic(topic).enableBatching(true)
                .batchingMaxMessages(1000).batchingMaxPublishDelay(10, TimeUnit.MILLISECONDS)
                .blockIfQueueFull(true).maxPendingMessages(10_000).sendTimeout(0, TimeUnit.SECONDS);
    }

    /** Seconds to produce n messages: plainly (then flush), or in transactions of perTxn. */
    private double produce(PulsarClient c, String topic, int n, int perTxn) throws Exception {
        try (Producer<byte[]> p = batched(c, topic).create()) {
            long t0 = System.nanoTime();
            if (perTxn <= 0) {
                for (int i = 0; i < n; i++) {
                    p.newMessage().key(Integer.toString(i)).value(payload).sendAsync();
                }
                p.flush();
            } else {
                for (int i = 0; i < n; ) {
                    Transaction txn = newTxn();
                    for (int j = 0; j < perTxn && i < n; j++, i++) {
                        p.newMessage(txn).key(Integer.toString(i)).value(payload).sendAsync();
                    }
                    txn.commit().get(60, TimeUnit.SECONDS);  // waits for its sends too
                }
            }
            return Stats.msSince(t0) / 1000;
        }
    }

    private Map<String, Object> throughput(int n, int perTxn) throws Exception {
        produce(client, fresh("v4-warm"), Math.min(n, 20_000), 0);
        produce(client, fresh("v4-warm"), Math.min(n, 20_000), perTxn);
        double plain = Double.MAX_VALUE;
        double txn = Double.MAX_VALUE;
        for (int i = 0; i < 2; i++) {  // alternating, best of two each
            plain = Math.min(plain, produce(client, fresh("v4-tp-plain"), n, 0));
            txn = Math.min(txn, produce(client, fresh("v4-tp-txn"), n, perTxn));
        }
        Map<String, Object> m = new LinkedHashMap<>();
        m.put("messages", n);
        m.put("messages_per_txn", perTxn);
        m.put("plain_msgs_per_s", Math.round(n / plain));
        m.put("txn_msgs_per_s", Math.round(n / txn));
        m.put("ratio_txn_over_plain", Stats.round(plain / txn));
        return m;
    }

    private double read(String topic, int n) throws Exception {
        try (Reader<byte[]> r = plainClient.newReader(Schema.BYTES).topic(topic)
                .startMessageId(MessageId.earliest).receiverQueueSize(2000).create()) {
            long t0 = System.nanoTime();
            for (int i = 0; i < n; i++) {
                Message<byte[]> m = r.readNext(10, TimeUnit.SECONDS);
                if (m == null) {
                    throw new TimeoutException("read " + i + " of " + n + " messages");
                }
                m.getData();
                m.getMessageId();
            }
            return Stats.msSince(t0) / 1000;
        }
    }

    /** The plain Java producer and reader: what the broker delivers to one client thread. */
    private Map<String, Object> deliveryLimit(int n) throws Exception {
        String topic = fresh("v4-limit");
        produce(plainClient, fresh("v4-warm"), Math.min(n, 20_000), 0);
        double prod = Math.min(produce(plainClient, topic, n, 0),
                produce(plainClient, fresh("v4-limit"), n, 0));
        read(topic, Math.min(n, 20_000));
        double rd = Math.min(read(topic, n), read(topic, n));
        Map<String, Object> m = new LinkedHashMap<>();
        m.put("messages", n);
        m.put("producer_msgs_per_s", Math.round(n / prod));
        m.put("reader_msgs_per_s", Math.round(n / rd));
        return m;
    }

    /**
     * Consume-transform-produce: per input message, receive it, send one output message
     * and {@code acknowledgeAsync(id, txn)} the input under the transaction, committing
     * every N messages; then both topics are checked: each input once in the output
     * (read by a reader of the transaction-enabled client), none left on the input.
     */
    private Map<String, Object> consumeTransformProduce(int n) throws Exception {
        Map<String, Object> res = new LinkedHashMap<>();
        res.put("unit", "one non-partitioned input topic (subscription, Exclusive), one "
                + "output topic; per input: receive, send one output message and "
                + "acknowledgeAsync(id, txn) the input under the transaction");
        ctpOnce(Math.min(n, 5_000), 100);  // warm-up
        for (int[] plan : Stats.ctpPlan(args.str("ctp-plan"))) {
            res.put(Integer.toString(plan[0]), ctpOnce(plan[1], plan[0]));
        }
        return res;
    }

    private Consumer<byte[]> ctpConsumer(String topic) throws Exception {
        return client.newConsumer(Schema.BYTES).topic(topic).subscriptionName("ctp")
                .subscriptionType(SubscriptionType.Exclusive)
                .subscriptionInitialPosition(SubscriptionInitialPosition.Earliest).subscribe();
    }

    private Map<String, Object> ctpOnce(int n, int perTxn) throws Exception {
        String src = fresh("v4-ctp-in");
        String dst = fresh("v4-ctp-out");
        try (Producer<byte[]> fill = batched(plainClient, src).create()) {
            for (int i = 0; i < n; i++) {
                fill.newMessage().key(Integer.toString(i)).value(Stats.ctpValue("in", i))
                        .sendAsync();
            }
            fill.flush();
        }
        List<Double> lat = new ArrayList<>();
        long t0;
        try (Consumer<byte[]> c = ctpConsumer(src);
             Producer<byte[]> out = batched(client, dst).create()) {
            t0 = System.nanoTime();
            Transaction txn = null;
            for (int i = 0; i < n; i++) {
                if (txn == null) {
                    txn = newTxn();
                }
                Message<byte[]> m = c.receive(10, TimeUnit.SECONDS);
                if (m == null) {
                    throw new TimeoutException("received " + i + " of " + n + " inputs");
                }
                out.newMessage(txn).key(m.getKey()).value(Stats.ctpTransform(m.getData()))
                        .sendAsync();
                c.acknowledgeAsync(m.getMessageId(), txn);
                if ((i + 1) % perTxn == 0 || i + 1 == n) {
                    long c0 = System.nanoTime();
                    txn.commit().get(60, TimeUnit.SECONDS);  // waits for its sends and acks
                    lat.add(Stats.msSince(c0));
                    txn = null;
                }
            }
        }
        double secs = Stats.msSince(t0) / 1000;
        Map<String, Object> m = new LinkedHashMap<>();
        m.put("messages", n);
        m.put("messages_per_txn", perTxn);
        m.put("msgs_per_s", Math.round(n / secs));
        m.putAll(Stats.commits(lat));
        Map<Integer, Integer> seen = new java.util.HashMap<>();
        try (Reader<byte[]> r = client.newReader(Schema.BYTES).topic(dst)
                .startMessageId(MessageId.earliest).create()) {
            while (true) {
                Message<byte[]> o = r.readNext(seen.size() >= n ? 2 : 10, TimeUnit.SECONDS);
                if (o == null) {
                    break;
                }
                seen.merge(Stats.ctpIndex(o.getData()), 1, Integer::sum);
            }
        }
        int again = 0;
        try (Consumer<byte[]> c = ctpConsumer(src)) {
            while (c.receive(2, TimeUnit.SECONDS) != null) {
                again++;
            }
        }
        m.putAll(Stats.ctpVerdict(n, seen, again));
        return m;
    }

    /**
     * A transaction writes one message, the topic is terminated (as a scale-down or a
     * migration does), then the transaction commits: how long until commit() answers,
     * with what, and whether a reader sees the message afterwards.
     */
    private Map<String, Object> afterTerminate(int reps, int timeoutS) throws Exception {
        List<Map<String, Object>> runs = new ArrayList<>();
        for (int r = 0; r < reps; r++) {
            String topic = fresh("v4-term");
            Producer<byte[]> p = client.newProducer(Schema.BYTES).topic(topic)
                    .enableBatching(false).sendTimeout(0, TimeUnit.SECONDS).create();
            Transaction txn = newTxn();
            p.newMessage(txn).value(payload).send();
            admin.topics().terminateTopic(topic);
            Map<String, Object> run = new LinkedHashMap<>();
            long t0 = System.nanoTime();
            try {
                txn.commit().get(timeoutS, TimeUnit.SECONDS);
                run.put("outcome", "committed");
            } catch (TimeoutException e) {
                run.put("outcome", "no answer within " + timeoutS + " s");
            } catch (ExecutionException e) {
                run.put("outcome", "failed: " + Results.describe(e.getCause()));
            }
            run.put("commit_ms", Stats.round(Stats.msSince(t0)));
            run.put("state_after", String.valueOf(txn.getState()));
            try {  // what the coordinator itself says about it now
                run.put("coordinator_status", admin.transactions()
                        .getTransactionMetadata(txn.getTxnID()).status);
            } catch (Exception e) {
                run.put("coordinator_status", "unknown: " + Results.describe(e));
            }
            try (Reader<byte[]> rd = plainClient.newReader(Schema.BYTES).topic(topic)
                    .startMessageId(MessageId.earliest).create()) {
                long v0 = System.nanoTime();
                boolean seen = rd.readNext(args.integer("visible-timeout-s", 10),
                        TimeUnit.SECONDS) != null;
                run.put("visible_after", seen);
                run.put("visible_after_ms", seen ? Stats.round(Stats.msSince(v0)) : null);
            }
            p.closeAsync();
            runs.add(run);
        }
        Map<String, Object> m = new LinkedHashMap<>();
        m.put("runs", runs);
        m.put("fence", "topic terminated (admin) after the write, before the commit");
        return m;
    }

    private void close() {
        try {
            admin.close();
            plainClient.close();
            client.close();
        } catch (Exception e) {
            System.err.println("close: " + Results.describe(e));
        }
    }
}
