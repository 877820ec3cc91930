package io.github.pulsartxn.peer.v5;

import io.github.pulsartxn.peer.Args;
import io.github.pulsartxn.peer.Results;
import io.github.pulsartxn.peer.Stats;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
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
import org.apache.pulsar.client.api.v5.Checkpoint;
import org.apache.pulsar.client.api.v5.CheckpointConsumer;
import org.apache.pulsar.client.api.v5.Message;
import org.apache.pulsar.client.api.v5.MessageId;
import org.apache.pulsar.client.api.v5.Producer;
import org.apache.pulsar.client.api.v5.ProducerBuilder;
import org.apache.pulsar.client.api.v5.PulsarClient;
import org.apache.pulsar.client.api.v5.QueueConsumer;
import org.apache.pulsar.client.api.v5.Transaction;
import org.apache.pulsar.client.api.v5.config.BatchingPolicy;
import org.apache.pulsar.client.api.v5.config.SubscriptionInitialPosition;
import org.apache.pulsar.client.api.v5.config.TransactionPolicy;
import org.apache.pulsar.client.api.v5.schema.Schema;
import org.apache.pulsar.common.policies.data.ScalableTopicMetadata;
import org.apache.pulsar.common.util.Murmur3_32Hash;

/**
 * PIP-473 transactions on scalable topics ({@code topic://}) with the Java v5 client
 * ({@code pulsar-client-v5}) on a 5.0 broker with {@code transactionCoordinatorEnabled},
 * {@code scalableTopicsEnabled} and {@code transactionCoordinatorScalableTopicsEnabled}.
 *
 * <p>The same measures as the v4 side, with segments in place of partitions: commit
 * latency for a transaction that wrote one message to each of 1, 8 and 64 segments (keys
 * chosen so each segment gets one); commit → visible to a checkpoint consumer already
 * waiting in {@code receive()}; produce throughput with and without transactions on a
 * one-segment topic; a commit after the segment the transaction wrote to was sealed by
 * a split.
 */
public final class V5Bench {
    private static final String NS = "topic://public/default/";

    private final Args args;
    private final PulsarClient client;
    private final PulsarAdmin admin;
    private final byte[] payload = new byte[100];

    private V5Bench(Args args) throws Exception {
        this.args = args;
        this.client = PulsarClient.builder().serviceUrl(args.str("service-url"))
                .operationTimeout(Duration.ofSeconds(30))
                .transactionPolicy(TransactionPolicy.builder().timeout(Duration.ofMinutes(5))
                        .build())
                .build();
        this.admin = PulsarAdmin.builder().serviceHttpUrl(args.str("admin-url")).build();
        java.util.Arrays.fill(payload, (byte) 'x');
    }

    public static void main(String[] argv) throws Exception {
        Args args = Args.parse(argv);
        Map<String, Object> ctx = new LinkedHashMap<>();
        ctx.put("client", "pulsar-client-v5 " + args.str("client-version", "5.0.0-M1"));
        Results out = new Results("pulsar-v5-pip473", ctx);
        V5Bench b;
        try {
            b = new V5Bench(args);
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
        System.exit(0);
    }

    private void run(Results out) {
        out.measure("coordinator_path", this::coordinatorPath);
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
        if (args.wants("ctp")) {
            out.measure("consume_transform_produce", () -> consumeTransformProduce(n));
        }
        if (args.wants("sealed")) {
            out.measure("commit_after_seal", () -> afterSeal(
                    args.integer("sealed-reps", 3), args.integer("sealed-timeout-s", 60)));
        }
    }

    /**
     * Which transaction coordinator this client talks to: the v5 builder marks the client
     * for scalable-topic transactions, whose discovery watches the PIP-473 coordinator's
     * assignments (the v4 path looks up the transaction_coordinator_assign topic instead).
     * Read by reflection, after one transaction, so the report can show it.
     */
    private Object coordinatorPath() throws Exception {
        newTxn().abort();
        Object v4 = field(client, "v4Client");
        Object conf = v4.getClass().getMethod("getConfiguration").invoke(v4);
        Object tc = field(v4, "tcClient");
        Map<String, Object> m = new LinkedHashMap<>();
        m.put("scalable_transactions",
                conf.getClass().getMethod("isScalableTransactions").invoke(conf));
        m.put("tc_discovery", field(tc, "discovery").getClass().getSimpleName());
        return m;
    }

    private static Object field(Object o, String name) throws Exception {
        for (Class<?> c = o.getClass(); c != null; c = c.getSuperclass()) {
            try {
                java.lang.reflect.Field f = c.getDeclaredField(name);
                f.setAccessible(true);
                return f.get(o);
            } catch (NoSuchFieldException e) {
                // look in the superclass
            }
        }
        throw new NoSuchFieldException(o.getClass().getName() + "." + name);
    }

    private int[] fanouts() {
        String[] s = args.str("fanouts", "1,8,64").split(",");
        int[] f = new int[s.length];
        for (int i = 0; i < s.length; i++) {
            f[i] = Integer.parseInt(s[i].trim());
        }
        return f;
    }

    private String create(String base, int segments) throws Exception {
        String name = NS + base + "-" + UUID.randomUUID().toString().substring(0, 8);
        admin.scalableTopics().createScalableTopic(name, segments);
        return name;
    }

    /** The producer's routing hash (Murmur3 32 of the UTF-8 key, low 16 bits). */
    private static int keyHash(String key) {
        return Murmur3_32Hash.getInstance().makeHash(key.getBytes(StandardCharsets.UTF_8))
                & 0xFFFF;
    }

    /** Active segments and, for each, a key whose hash falls strictly inside its range. */
    private Map<Long, String> keysPerSegment(String topic) throws Exception {
        ScalableTopicMetadata md = admin.scalableTopics().getMetadata(topic);
        Map<Long, String> keys = new LinkedHashMap<>();
        List<ScalableTopicMetadata.SegmentInfo> active = new ArrayList<>();
        for (ScalableTopicMetadata.SegmentInfo s : md.getSegments().values()) {
            if (s.isActive()) {
                active.add(s);
            }
        }
        for (int c = 0; keys.size() < active.size(); c++) {
            if (c > 10_000_000) {
                throw new IllegalStateException("no key found for every segment of " + topic);
            }
            String k = "k" + c;
            int h = keyHash(k);
            for (ScalableTopicMetadata.SegmentInfo s : active) {
                int lo = s.getHashRange().getStart();
                int hi = s.getHashRange().getEnd();
                if (h > lo && h < hi && !keys.containsKey(s.getSegmentId())) {
                    keys.put(s.getSegmentId(), k);
                }
            }
        }
        return keys;
    }

    private Transaction newTxn() throws Exception {
        return client.newTransactionAsync().get(30, TimeUnit.SECONDS);
    }

    private Producer<byte[]> unbatched(String topic) throws Exception {
        return client.newProducer(Schema.bytes()).topic(topic)
                .batchingPolicy(BatchingPolicy.ofDisabled()).create();
    }

    private CompletableFuture<MessageId> send(Producer<byte[]> p, String key, Transaction txn) {
        var m = p.async().newMessage().key(key).value(payload);
        return (txn == null ? m : m.transaction(txn)).send();
    }

    private Map<String, Object> commitLatency(int[] fanouts, int reps, int warm) throws Exception {
        Map<Integer, Producer<byte[]>> producers = new LinkedHashMap<>();
        Map<Integer, List<String>> keys = new LinkedHashMap<>();
        Map<Integer, List<Double>> lat = new LinkedHashMap<>();
        for (int f : fanouts) {
            String topic = create("v5-fan" + f, f);
            keys.put(f, new ArrayList<>(keysPerSegment(topic).values()));
            if (keys.get(f).size() != f) {
                throw new IllegalStateException(topic + " has " + keys.get(f).size()
                        + " active segments, expected " + f);
            }
            producers.put(f, unbatched(topic));
            lat.put(f, new ArrayList<>());
        }
        for (int r = 0; r < warm + reps; r++) {
            for (int f : fanouts) {
                Producer<byte[]> p = producers.get(f);
                Transaction txn = newTxn();
                List<CompletableFuture<MessageId>> sends = new ArrayList<>();
                for (String k : keys.get(f)) {
                    sends.add(send(p, k, txn));
                }
                CompletableFuture.allOf(sends.toArray(new CompletableFuture[0]))
                        .get(30, TimeUnit.SECONDS);
                long t0 = System.nanoTime();
                txn.async().commit().get(60, TimeUnit.SECONDS);
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
        res.put("unit", "segments of one scalable topic, one message each");
        return res;
    }

    /** As V4Bench.visibility: tagged messages, a missing one counted and skipped. */
    private Map<String, Object> visibility(int reps, int warm) throws Exception {
        int limitS = args.integer("visible-timeout-s", 10);
        String topic = create("v5-vis", 1);
        Producer<byte[]> p = unbatched(topic);
        CheckpointConsumer<byte[]> reader = client.newCheckpointConsumer(Schema.bytes())
                .topic(topic).startPosition(Checkpoint.earliest()).create();
        ExecutorService waiter = Executors.newSingleThreadExecutor();
        List<Double> lat = new ArrayList<>();
        List<Integer> missingReps = new ArrayList<>();
        AtomicInteger late = new AtomicInteger();
        try {
            for (int r = 0; r < warm + reps; r++) {
                final int rep = r;
                Transaction txn = newTxn();
                p.async().newMessage().key("k").value(Stats.tagged(rep)).transaction(txn)
                        .send().get(30, TimeUnit.SECONDS);
                Future<Long> woke = waiter.submit(() -> {
                    while (true) {
                        Message<byte[]> m = reader.receive(Duration.ofSeconds(limitS));
                        if (m == null) {
                            return -1L;
                        }
                        if (Stats.isTagged(m.value(), rep)) {
                            return System.nanoTime();
                        }
                        late.incrementAndGet();
                    }
                });
                Thread.sleep(10);
                long t0 = System.nanoTime();
                txn.async().commit().get(60, TimeUnit.SECONDS);
                long t1 = woke.get(limitS + 30, TimeUnit.SECONDS);
                if (t1 < 0) {
                    missingReps.add(r);
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
        m.put("not_visible", missingReps.size());
        m.put("not_visible_reps", missingReps.size() > 20
                ? missingReps.subList(0, 20) : missingReps);
        m.put("seen_late", late.get());
        return m;
    }

    private ProducerBuilder<byte[]> batched(String topic) {
        return client.newProducer(Schema.bytes()).topic(topic).blockIfQueueFull(true)
                .batchingPolicy(BatchingPolicy.builder().enabled(true).maxMessages(1000)
                        .maxPublishDelay(Duration.ofMillis(10)).build());
    }

    private double produce(String topic, int n, int perTxn) throws Exception {
        try (Producer<byte[]> p = batched(topic).create()) {
            long t0 = System.nanoTime();
            if (perTxn <= 0) {
                for (int i = 0; i < n; i++) {
                    send(p, Integer.toString(i), null);
                }
                p.async().flush().get(60, TimeUnit.SECONDS);
            } else {
                for (int i = 0; i < n; ) {
                    Transaction txn = newTxn();
                    List<CompletableFuture<MessageId>> sends = new ArrayList<>(perTxn);
                    for (int j = 0; j < perTxn && i < n; j++, i++) {
                        sends.add(send(p, Integer.toString(i), txn));
                    }
                    // the v5 producer hands sends to segment producers asynchronously:
                    // wait until they are all positioned, then commit
                    CompletableFuture.allOf(sends.toArray(new CompletableFuture[0]))
                            .get(60, TimeUnit.SECONDS);
                    txn.async().commit().get(60, TimeUnit.SECONDS);
                }
            }
            return Stats.msSince(t0) / 1000;
        }
    }

    private Map<String, Object> throughput(int n, int perTxn) throws Exception {
        produce(create("v5-warm", 1), Math.min(n, 20_000), 0);
        produce(create("v5-warm", 1), Math.min(n, 20_000), perTxn);
        double plain = Double.MAX_VALUE;
        double txn = Double.MAX_VALUE;
        for (int i = 0; i < 2; i++) {
            plain = Math.min(plain, produce(create("v5-tp-plain", 1), n, 0));
            txn = Math.min(txn, produce(create("v5-tp-txn", 1), n, perTxn));
        }
        Map<String, Object> m = new LinkedHashMap<>();
        m.put("messages", n);
        m.put("messages_per_txn", perTxn);
        m.put("segments", 1);
        m.put("plain_msgs_per_s", Math.round(n / plain));
        m.put("txn_msgs_per_s", Math.round(n / txn));
        m.put("ratio_txn_over_plain", Stats.round(plain / txn));
        return m;
    }

    /**
     * Consume-transform-produce on one-segment scalable topics: per input message,
     * receive it (queue consumer), send one output message and acknowledge the input
     * with {@code acknowledge(id, txn)}, committing every N messages; then each input
     * once in the output (checkpoint consumer from the earliest), none left on the input.
     */
    private Map<String, Object> consumeTransformProduce(int n) throws Exception {
        Map<String, Object> res = new LinkedHashMap<>();
        res.put("unit", "one-segment scalable input topic (queue consumer), one-segment "
                + "output topic; per input: receive, send one output message and "
                + "acknowledge(id, txn) the input under the transaction");
        ctpOnce(Math.min(n, 5_000), 100);  // warm-up
        for (int[] plan : Stats.ctpPlan(args.str("ctp-plan"))) {
            res.put(Integer.toString(plan[0]), ctpOnce(plan[1], plan[0]));
        }
        return res;
    }

    private QueueConsumer<byte[]> ctpConsumer(String topic) throws Exception {
        return client.newQueueConsumer(Schema.bytes()).topic(topic).subscriptionName("ctp")
                .subscriptionInitialPosition(SubscriptionInitialPosition.EARLIEST).subscribe();
    }

    private Map<String, Object> ctpOnce(int n, int perTxn) throws Exception {
        String src = create("v5-ctp-in", 1);
        String dst = create("v5-ctp-out", 1);
        try (Producer<byte[]> fill = batched(src).create()) {
            for (int i = 0; i < n; i++) {
                fill.async().newMessage().key(Integer.toString(i))
                        .value(Stats.ctpValue("in", i)).send();
            }
            fill.async().flush().get(60, TimeUnit.SECONDS);
        }
        List<Double> lat = new ArrayList<>();
        long t0;
        QueueConsumer<byte[]> c = ctpConsumer(src);
        try (Producer<byte[]> out = batched(dst).create()) {
            t0 = System.nanoTime();
            Transaction txn = null;
            List<CompletableFuture<MessageId>> sends = new ArrayList<>();
            for (int i = 0; i < n; i++) {
                if (txn == null) {
                    txn = newTxn();
                }
                Message<byte[]> m = c.receive(Duration.ofSeconds(10));
                if (m == null) {
                    throw new TimeoutException("received " + i + " of " + n + " inputs");
                }
                sends.add(out.async().newMessage().key(m.key().orElse("")).transaction(txn)
                        .value(Stats.ctpTransform(m.value())).send());
                c.acknowledge(m.id(), txn);
                if ((i + 1) % perTxn == 0 || i + 1 == n) {
                    // as in the produce measure: the v5 producer hands sends on
                    // asynchronously; wait until they are positioned, then commit. The
                    // wait is part of the commit's time, as the v4 client's and
                    // pulsar-txn's commit() wait for their sends themselves
                    long c0 = System.nanoTime();
                    CompletableFuture.allOf(sends.toArray(new CompletableFuture[0]))
                            .get(60, TimeUnit.SECONDS);
                    sends.clear();
                    txn.async().commit().get(60, TimeUnit.SECONDS);
                    lat.add(Stats.msSince(c0));
                    txn = null;
                }
            }
        } finally {
            c.close();
        }
        double secs = Stats.msSince(t0) / 1000;
        Map<String, Object> m = new LinkedHashMap<>();
        m.put("messages", n);
        m.put("messages_per_txn", perTxn);
        m.put("msgs_per_s", Math.round(n / secs));
        m.putAll(Stats.commits(lat));
        Map<Integer, Integer> seen = new java.util.HashMap<>();
        CheckpointConsumer<byte[]> r = client.newCheckpointConsumer(Schema.bytes())
                .topic(dst).startPosition(Checkpoint.earliest()).create();
        try {
            while (true) {
                Message<byte[]> o = r.receive(Duration.ofSeconds(seen.size() >= n ? 2 : 10));
                if (o == null) {
                    break;
                }
                seen.merge(Stats.ctpIndex(o.value()), 1, Integer::sum);
            }
        } finally {
            r.close();
        }
        int again = 0;
        QueueConsumer<byte[]> c2 = ctpConsumer(src);
        try {
            while (c2.receive(Duration.ofSeconds(2)) != null) {
                again++;
            }
        } finally {
            c2.close();
        }
        m.putAll(Stats.ctpVerdict(n, seen, again));
        return m;
    }

    /**
     * A transaction writes one message to a one-segment topic, the segment is split
     * (sealed: its two children take over the hash range), then the transaction commits.
     */
    private Map<String, Object> afterSeal(int reps, int timeoutS) throws Exception {
        List<Map<String, Object>> runs = new ArrayList<>();
        for (int r = 0; r < reps; r++) {
            runs.add(sealOnce(true, timeoutS));
        }
        Map<String, Object> m = new LinkedHashMap<>();
        m.put("runs", runs);
        // the same steps without a transaction: can a reader see a message written to a
        // segment before it was sealed at all? (tells a reading problem from a commit one)
        m.put("control_without_txn", sealOnce(false, timeoutS));
        m.put("fence", "segment sealed by a split (admin) after the write, before the commit");
        return m;
    }

    private Map<String, Object> sealOnce(boolean transactional, int timeoutS) throws Exception {
        String topic = create("v5-seal", 1);
        Map<Long, String> keys = keysPerSegment(topic);
        long seg = keys.keySet().iterator().next();
        Producer<byte[]> p = unbatched(topic);
        Transaction txn = transactional ? newTxn() : null;
        send(p, keys.get(seg), txn).get(30, TimeUnit.SECONDS);
        admin.scalableTopics().splitSegment(topic, seg);
        Map<String, Object> run = new LinkedHashMap<>();
        if (txn != null) {
            long t0 = System.nanoTime();
            try {
                txn.async().commit().get(timeoutS, TimeUnit.SECONDS);
                run.put("outcome", "committed");
            } catch (TimeoutException e) {
                run.put("outcome", "no answer within " + timeoutS + " s");
            } catch (ExecutionException e) {
                run.put("outcome", "failed: " + Results.describe(e.getCause()));
            }
            run.put("commit_ms", Stats.round(Stats.msSince(t0)));
            run.put("state_after", String.valueOf(txn.state()));
        }
        try (CheckpointConsumer<byte[]> c = client.newCheckpointConsumer(Schema.bytes())
                .topic(topic).startPosition(Checkpoint.earliest()).create()) {
            long v0 = System.nanoTime();
            boolean seen = c.receive(Duration.ofSeconds(args.integer("visible-timeout-s", 10)))
                    != null;
            run.put("visible_after", seen);
            run.put("visible_after_ms", seen ? Stats.round(Stats.msSince(v0)) : null);
        }
        p.async().close();
        return run;
    }

    private void close() {
        try {
            admin.close();
            client.close();
        } catch (Exception e) {
            System.err.println("close: " + Results.describe(e));
        }
    }
}
