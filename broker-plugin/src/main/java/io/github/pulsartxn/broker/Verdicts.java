package io.github.pulsartxn.broker;

import java.util.ArrayList;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.TimeUnit;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;
import redis.clients.jedis.StreamEntryID;
import redis.clients.jedis.exceptions.JedisConnectionException;

/**
 * The broker-wide state both plugin points share (the transaction-buffer provider and
 * the entry filter are loaded separately, so it is a singleton): the metastore
 * connection, the namespace, the final verdicts, the gates of the loaded topics and
 * the one watcher of the decision events that wakes them.
 *
 * <p>Verdicts are final once decided (ids are never reused, a decision never changes,
 * collection keeps the aborted-writer sets), so they are cached without invalidation;
 * an OPEN transaction's WAIT is never cached.
 */
public final class Verdicts implements AutoCloseable {
    private static final Logger log = LoggerFactory.getLogger(Verdicts.class);
    private static volatile Verdicts instance;

    private final PluginConfig config;
    private final RedisMetastore store;
    private volatile Namespace namespace;
    private final Map<String, Verdict> cache;
    private final Map<String, Boolean> decided;
    private final Set<PtxnTransactionBuffer> gates = ConcurrentHashMap.newKeySet();
    private final ScheduledExecutorService exec;
    private final ScheduledExecutorService ticker;
    private final Thread watcher;
    private volatile boolean closed;
    private volatile long lastWarnMs;
    private volatile String runId;
    /** Why the server's persistence does not match ?durability= (null: it does); until
     *  the first check, unchecked: governed topics hold. */
    private volatile String persistenceProblem = "its persistence settings are not checked yet";
    private volatile String lastPersistenceLog;
    private volatile long lastPersistenceLogMs;

    private Verdicts(PluginConfig config) {
        this.config = config;
        this.store = new RedisMetastore(config.metastoreUrl(), config.passwordFile());
        this.cache = lru(config.cacheSize());
        this.decided = lru(config.cacheSize());
        this.exec = Executors.newSingleThreadScheduledExecutor(r -> daemon(r, "ptxn-gates"));
        // its own thread: a restore or a reset is noticed on time even while gate
        // computations wait for an unreachable Redis
        this.ticker = Executors.newSingleThreadScheduledExecutor(r -> daemon(r, "ptxn-tick"));
        this.ticker.scheduleWithFixedDelay(this::tick, 500, 500, TimeUnit.MILLISECONDS);
        this.watcher = daemon(this::watch, "ptxn-events");
        this.watcher.start();
        log.info("pulsar-txn broker plugin: metastore {} namespace '{}', governing {}",
                config.shownUrl(), config.metastoreNamespace(), config.pulsarNamespaces());
    }

    /** The broker's instance, made from its configuration at first use. */
    public static Verdicts of(Properties brokerProperties) {
        Verdicts v = instance;
        if (v == null) {
            synchronized (Verdicts.class) {
                v = instance;
                if (v == null) {
                    v = instance = new Verdicts(PluginConfig.from(brokerProperties));
                }
            }
        }
        return v;
    }

    private static <V> Map<String, V> lru(int size) {
        return Collections.synchronizedMap(new LinkedHashMap<>(1024, 0.75f, true) {
            @Override
            protected boolean removeEldestEntry(Map.Entry<String, V> e) {
                return size() > size;
            }
        });
    }

    private static Thread daemon(Runnable r, String name) {
        Thread t = new Thread(r, name);
        t.setDaemon(true);
        return t;
    }

    public PluginConfig config() {
        return config;
    }

    RedisMetastore store() {
        return store;
    }

    /** The namespace's config, read once it exists; null until then (read again each
     *  time: the library creates it at its first write). */
    public Namespace namespace() {
        if (persistenceProblem != null) {
            return null; // a decision read now could still be lost: nothing new passes
        }
        Namespace ns = namespace;
        if (ns == null) {
            ns = namespace = Namespace.readIfExists(store, config.metastoreNamespace());
        }
        return ns;
    }

    /** An entry's verdict; throws if the metastore cannot tell (the caller holds). */
    public Verdict classify(Map<String, String> props, String segment) {
        if (!props.containsKey(EntryTxn.PROP_TXN)) {
            return Verdict.DELIVER; // plain: no round trip, no cache entry
        }
        String problem = persistenceProblem;
        if (problem != null) {
            throw new IllegalStateException("the metastore " + config.shownUrl() + ": " + problem);
        }
        Namespace ns = namespace();
        if (ns == null) {
            throw new IllegalStateException("pulsar-txn namespace '" + config.metastoreNamespace()
                    + "' does not exist in the metastore " + config.shownUrl());
        }
        EntryTxn e = EntryTxn.of(props, ns.deployment(), ns.partitions());
        if (e.kind() == EntryTxn.Kind.NEVER) {
            // REJECT is permanent: before it, the namespace's config as it is now (a
            // reset may have given it another deployment id or partition count)
            Namespace now = Namespace.readIfExists(store, config.metastoreNamespace());
            if (now == null) {
                throw new IllegalStateException("pulsar-txn namespace '" + config.metastoreNamespace()
                        + "' does not exist in the metastore " + config.shownUrl());
            }
            if (!now.equals(ns)) {
                cache.clear();
                decided.clear();
                namespace = ns = now;
                e = EntryTxn.of(props, ns.deployment(), ns.partitions());
            }
        }
        if (e.kind() != EntryTxn.Kind.TXN) {
            return e.kind() == EntryTxn.Kind.PLAIN ? Verdict.DELIVER : Verdict.SKIP;
        }
        // the parsed transaction and writer, never the raw text: two texts that parse
        // differently must not share a verdict
        // the deployment too: after a reset the ids start again, and a verdict put late by a
        // classification that began before it must never answer for the new deployment
        String key = ns.deployment() + '\u0000' + segment + '\u0000' + e.partition() + ':' + e.seq()
                + '\u0000' + e.writer();
        Verdict v = cache.get(key);
        if (v == null) {
            Classifier.Result r = new Classifier(store, ns, config.waitaof()).classify(e, segment);
            v = r.verdict();
            if (r.isFinal()) {
                cache.put(key, v);
            }
        }
        return v;
    }

    /** Whether transaction (p, seq) has ended for the gate. Ended is final and cached. */
    boolean ended(Namespace ns, int p, long seq) {
        String key = ns.deployment() + '\u0000' + p + ":" + seq; // see classify: a reset
        if (decided.containsKey(key)) {
            return true;
        }
        boolean done = new Classifier(store, ns, config.waitaof()).ended(p, seq);
        if (done) {
            decided.put(key, Boolean.TRUE);
        }
        return done;
    }

    void schedule(PtxnTransactionBuffer gate) {
        gate.schedule(exec);
    }

    void register(PtxnTransactionBuffer gate) {
        gates.add(gate);
        gate.schedule(exec);
    }

    void unregister(PtxnTransactionBuffer gate) {
        gates.remove(gate);
    }

    void warn(String what, Throwable e) {
        long now = System.currentTimeMillis();
        if (now - lastWarnMs > 10_000) { // a Redis outage must not flood the broker's log
            lastWarnMs = now;
            log.warn("pulsar-txn broker plugin: {} (metastore {}): {}", what, config.shownUrl(), e.toString());
        }
    }

    /** Gates below their topic's last entry look again: a `!` registration that got its
     *  position, an event missed while Redis was away. */
    private void tick() {
        try {
            String run = store.runId();
            if (!run.equals(runId)) {
                if (runId != null) {
                    // a restart, perhaps from an older copy of the data (a restore): a
                    // decision cached from before may be gone, the namespace reset
                    log.warn("pulsar-txn broker plugin: the metastore {} restarted (run id changed); "
                            + "cached verdicts dropped", config.shownUrl());
                    cache.clear();
                    decided.clear();
                    namespace = null;
                }
                runId = run;
            }
        } catch (RuntimeException e) {
            warn("the metastore's run id could not be read (its ACL user needs +info to notice "
                    + "a restore); gates hold while it is unreachable", e);
        }
        checkPersistence();
        try {
            // a reset (the namespace wiped and made again, perhaps with another deployment
            // id or partition count) without a restart: read its config every tick; the
            // object in use is replaced only when it differs (the watcher follows it)
            Namespace now = Namespace.readIfExists(store, config.metastoreNamespace());
            Namespace was = namespace;
            if (was == null || !was.equals(now)) {
                if (was != null) {
                    log.warn("pulsar-txn broker plugin: namespace '{}' changed in the metastore {} "
                            + "(a reset); cached verdicts dropped", config.metastoreNamespace(),
                            config.shownUrl());
                }
                cache.clear();
                decided.clear();
                namespace = now;
            }
            if (now == null) {
                warn("the pulsar-txn namespace '" + config.metastoreNamespace()
                        + "' does not exist yet; its Pulsar topics are held", new IllegalStateException(
                        "no " + KeyLayout.config(config.metastoreNamespace())));
            }
        } catch (RuntimeException e) {
            warn("the metastore could not be asked; gates hold", e);
        }
        for (PtxnTransactionBuffer g : gates) {
            if (g.behind()) {
                g.schedule(exec);
            }
        }
    }

    /** Starts a follower of the decision events per group of streams one command may
     *  read (all of them on one server, a hash slot's on a cluster), again for a reset
     *  namespace; a follower of an earlier namespace ends by itself. */
    /** The library's persistence check, every tick; a problem is logged when it changes
     *  and every minute while it lasts (not behind the other warnings' rate limit). */
    private void checkPersistence() {
        if (config.durability().equals("relaxed")) { // nothing to check, nothing asked
            persistenceProblem = null;
            return;
        }
        String problem;
        try {
            problem = Persistence.problem(config.durability(), store.persistence());
        } catch (JedisConnectionException e) { // away: it holds anyway, and says so elsewhere
            problem = "it cannot be reached";
        } catch (RuntimeException e) {
            problem = "its persistence settings cannot be read (" + e.getClass().getSimpleName() + "); its ACL"
                    + " user needs +config|get (and +cluster|nodes on a cluster)";
        }
        persistenceProblem = problem;
        long now = System.currentTimeMillis();
        if (problem != null && (!problem.equals(lastPersistenceLog) || now - lastPersistenceLogMs > 60_000)) {
            lastPersistenceLog = problem;
            lastPersistenceLogMs = now;
            log.warn("pulsar-txn broker plugin: the metastore {}: {}; its governed topics are held",
                    config.shownUrl(), problem);
        } else if (problem == null && lastPersistenceLog != null) {
            lastPersistenceLog = null;
            log.info("pulsar-txn broker plugin: the metastore {}: persistence matches ?durability={}",
                    config.shownUrl(), config.durability());
        }
    }

    private void watch() {
        Namespace watched = null;
        while (!closed) {
            try {
                Namespace ns = namespace();
                if (ns != null && !ns.equals(watched)) { // first, or after a reset
                    watched = ns;
                    List<String> keys = new ArrayList<>();
                    for (int p = 0; p < ns.partitions(); p++) {
                        keys.add(ns.keys().events(p));
                    }
                    for (List<String> group : store.slotGroups(keys)) {
                        Namespace mine = ns;
                        daemon(() -> follow(mine, group), "ptxn-events").start();
                    }
                }
            } catch (RuntimeException e) {
                warn("the namespace could not be read to watch its decision events; gates hold", e);
            }
            sleep(500);
        }
    }

    /** Wakes every gate when a decision event arrives on one of {@code keys}. */
    private void follow(Namespace ns, List<String> keys) {
        Map<String, StreamEntryID> after = null;
        while (!closed) {
            Namespace now = namespace;
            if (now != null && !now.equals(ns)) {
                return; // a reset: the watcher follows the new namespace's streams
            }
            try {
                if (after == null) {
                    after = new LinkedHashMap<>();
                    for (String k : keys) {
                        after.put(k, store.lastId(k));
                    }
                }
                Map<String, StreamEntryID> got = store.waitForEvents(after, 1000);
                if (!got.equals(after)) {
                    after = got;
                    for (PtxnTransactionBuffer g : gates) {
                        g.schedule(exec);
                    }
                }
            } catch (RuntimeException e) {
                warn("watching the decision events failed; gates hold and retry", e);
                after = null; // the tick catches up what is missed meanwhile
                sleep(1000);
            }
        }
    }

    private static void sleep(long ms) {
        try {
            Thread.sleep(ms);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }

    @Override
    public void close() {
        closed = true;
        ticker.shutdownNow();
        exec.shutdownNow();
        store.close();
    }
}
