package io.github.pulsartxn.broker;

import java.io.IOException;
import java.net.URI;
import java.net.URISyntaxException;
import java.net.URLDecoder;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashMap;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.function.Supplier;
import org.apache.commons.pool2.impl.GenericObjectPoolConfig;
import redis.clients.jedis.Connection;
import redis.clients.jedis.ConnectionPool;
import redis.clients.jedis.DefaultJedisClientConfig;
import redis.clients.jedis.HostAndPort;
import redis.clients.jedis.Jedis;
import redis.clients.jedis.JedisCluster;
import redis.clients.jedis.JedisPooled;
import redis.clients.jedis.StreamEntryID;
import redis.clients.jedis.UnifiedJedis;
import redis.clients.jedis.params.XReadParams;
import redis.clients.jedis.resps.StreamEntry;
import redis.clients.jedis.util.JedisClusterCRC16;

/**
 * The metastore as the plugin reads it: pulsar-txn's keys on one Redis server (a
 * {@code redis://} or {@code rediss://} URL) or on a Redis Cluster
 * ({@code redis+cluster://} or {@code rediss+cluster://}, seeds {@code host:port,...}),
 * with the library's query options, which the plugin ignores. Read only: the plugin
 * never writes a protocol key. On a cluster every command names keys of one hash slot
 * (the library's layout makes each command's keys share one), and the decision streams
 * are read a slot at a time ({@link #slotGroups}).
 */
public final class RedisMetastore implements MetastoreView, AutoCloseable {
    /** Connections per node: a blocking read of each slot's streams, and the gates'. */
    private static final int CLUSTER_POOL = 64;

    /** Connections a caller waits for at most (then the metastore counts as away). */
    private static final Duration POOL_WAIT = Duration.ofSeconds(2);
    /** Connections to a single server: the watcher, the tick, the gate thread and the
     *  dispatcher threads' filter reads. */
    private static final int SERVER_POOL = 32;

    /** Made on first use: a cluster client connects when made, and a cluster that is
     *  down when the broker starts must hold governed topics, not fail every load. */
    private final Supplier<UnifiedJedis> connect;
    private volatile UnifiedJedis client;
    private final boolean cluster;
    /** The node that last answered CLUSTER NODES: asked first next time. */
    private volatile String lastAnswering;

    public RedisMetastore(String url) {
        this(url, null);
    }

    /** {@code passwordFile}: the password, kept out of the URL (a standalone's embedded
     *  bookie logs every setting of its configuration file, the URL included). */
    public RedisMetastore(String url, Path passwordFile) {
        if (url.startsWith("redis+cluster://") || url.startsWith("rediss+cluster://")) {
            this.connect = cluster(url, passwordFile);
            this.cluster = true;
            return;
        }
        this.cluster = false;
        URI u;
        String shown = PluginConfig.URL + " " + PluginConfig.redact(url);
        try {
            u = new URI(url);
        } catch (URISyntaxException e) { // its text holds the whole URL, password included
            throw new IllegalArgumentException(shown + " is not a URL");
        }
        if (u.getHost() == null) {
            throw new IllegalArgumentException(shown + ": no host name a URL allows (letters, digits,"
                    + " '-' and '.'; not '_')");
        }
        String query = u.getRawQuery() == null ? "" : "&" + u.getRawQuery();
        if (query.contains("&password=")) {
            throw new IllegalArgumentException(shown + ": the password goes in the userinfo"
                    + " (redis://user:password@host), not in ?password=");
        }
        // the library's options (?namespace=, ?durability=) are not Redis' own; the path
        // is the database number, kept encoded as it was written
        String path = u.getRawPath() == null ? "" : u.getRawPath();
        if (!path.matches("(/[0-9]*)?")) {
            throw new IllegalArgumentException(shown + ": the path must be a database number (/0)");
        }
        if (!u.getScheme().equals("redis") && !u.getScheme().equals("rediss")) {
            throw new IllegalArgumentException(shown + ": the scheme must be redis, rediss, redis+cluster"
                    + " or rediss+cluster");
        }
        int db = path.length() > 1 ? Integer.parseInt(path.substring(1)) : 0;
        DefaultJedisClientConfig.Builder cfg = credentials(u.getRawUserInfo(), passwordFile, shown).database(db);
        if (u.getScheme().equals("rediss")) {
            cfg.ssl(true).sslSocketFactory(MetastoreTls.factory(url, shown))
                    .sslParameters(MetastoreTls.checkingHostName());
        }
        HostAndPort at = new HostAndPort(u.getHost(), u.getPort() < 0 ? 6379 : u.getPort());
        var config = cfg.build();
        this.connect = () -> new JedisPooled(at, config, pool(SERVER_POOL));
    }

    private static GenericObjectPoolConfig<Connection> pool(int size) {
        GenericObjectPoolConfig<Connection> pool = new GenericObjectPoolConfig<>();
        pool.setMaxTotal(size);
        pool.setMaxIdle(size);
        pool.setMaxWait(POOL_WAIT);
        return pool;
    }

    private UnifiedJedis redis() {
        UnifiedJedis r = client;
        if (r == null) {
            synchronized (this) {
                r = client;
                if (r == null) {
                    r = client = connect.get();
                }
            }
        }
        return r;
    }

    /** The ACL user and password from the raw userinfo ({@code user:password},
     *  percent-encoded), or the password from its file. */
    private static DefaultJedisClientConfig.Builder credentials(String userInfo, Path passwordFile, String shown) {
        String user = null;
        String password = null;
        if (userInfo != null) {
            int colon = userInfo.indexOf(':');
            user = decode(colon >= 0 ? userInfo.substring(0, colon) : userInfo, shown);
            password = colon >= 0 ? decode(userInfo.substring(colon + 1), shown) : null;
        }
        if (passwordFile != null) {
            if (password != null) {
                throw new IllegalArgumentException(shown + ": a password in the URL and in "
                        + PluginConfig.PASSWORD_FILE + "; give one");
            }
            try {
                password = Files.readString(passwordFile, StandardCharsets.UTF_8).strip();
            } catch (IOException e) {
                throw new IllegalArgumentException(PluginConfig.PASSWORD_FILE + " " + passwordFile
                        + " cannot be read: " + e.getClass().getSimpleName());
            }
        }
        return DefaultJedisClientConfig.builder().user(user == null || user.isEmpty() ? null : user)
                .password(password);
    }

    /** A cluster client from {@code redis+cluster://[user:password@]h:p[,h:p...][/0][?...]}:
     *  any node is a seed; the client learns the slot owners and follows MOVED replies. */
    private static Supplier<UnifiedJedis> cluster(String url, Path passwordFile) {
        String shown = PluginConfig.URL + " " + PluginConfig.redact(url);
        int s = url.indexOf("://") + 3;
        int end = PluginConfig.authorityEnd(url, s);
        String authority = url.substring(s, end);
        String rest = url.substring(end);
        if (rest.indexOf('@') >= 0) {
            throw new IllegalArgumentException(shown + ": a password holding '/', '?' or '#' must be"
                    + " percent-encoded");
        }
        String query = rest.indexOf('?') >= 0 ? "&" + rest.substring(rest.indexOf('?') + 1) : "";
        if (query.contains("&password=")) {
            throw new IllegalArgumentException(shown + ": the password goes in the userinfo"
                    + " (redis+cluster://user:password@host:port,...), not in ?password=");
        }
        String path = rest.indexOf('?') >= 0 ? rest.substring(0, rest.indexOf('?')) : rest;
        if (!List.of("", "/", "/0").contains(path)) {
            throw new IllegalArgumentException(shown + ": a Redis Cluster has database 0 only");
        }
        int at = authority.lastIndexOf('@');
        DefaultJedisClientConfig.Builder cfg = credentials(at >= 0 ? authority.substring(0, at) : null,
                passwordFile, shown);
        Set<HostAndPort> seeds = new LinkedHashSet<>();
        for (String hp : authority.substring(at + 1).split(",")) {
            int colon = hp.strip().lastIndexOf(':');
            String host = colon > 0 ? hp.strip().substring(0, colon).replaceAll("^\\[|\\]$", "") : "";
            String port = colon > 0 ? hp.strip().substring(colon + 1) : "";
            if (host.isEmpty() || !port.matches("[0-9]{1,5}")) {
                throw new IllegalArgumentException(shown + ": cluster seeds must be host:port,"
                        + " comma-separated");
            }
            seeds.add(new HostAndPort(host, Integer.parseInt(port)));
        }
        if (url.startsWith("rediss")) {
            cfg.ssl(true).sslSocketFactory(MetastoreTls.factory(url, shown))
                    .sslParameters(MetastoreTls.checkingHostName());
        }
        var config = cfg.build();
        return () -> new JedisCluster(seeds, config, pool(CLUSTER_POOL));
    }

    private static String decode(String s, String shown) {
        try {
            return URLDecoder.decode(s.replace("+", "%2B"), StandardCharsets.UTF_8);
        } catch (IllegalArgumentException e) { // its text quotes the bad characters
            throw new IllegalArgumentException(shown + ": the userinfo is not percent-encoded correctly");
        }
    }

    /** The keys in groups a single command may name: all of them on one server, one
     *  hash slot each on a cluster (which refuses a command across slots). */
    public List<List<String>> slotGroups(Collection<String> keys) {
        if (!cluster) {
            return List.of(new ArrayList<>(keys));
        }
        Map<Integer, List<String>> bySlot = new TreeMap<>();
        for (String k : keys) {
            bySlot.computeIfAbsent(JedisClusterCRC16.getSlot(k), x -> new ArrayList<>()).add(k);
        }
        return new ArrayList<>(bySlot.values());
    }

    @Override
    public Map<String, String> hgetall(String key) {
        return redis().hgetAll(key);
    }

    @Override
    public Double zscore(String key, String member) {
        return redis().zscore(key, member);
    }

    @Override
    public String zlastAtOrBelow(String key, double max) {
        List<String> got = redis().zrevrangeByScore(key, max, Double.NEGATIVE_INFINITY, 0, 1);
        return got.isEmpty() ? null : got.get(0);
    }

    @Override
    public boolean sismember(String key, String member) {
        return redis().sismember(key, member);
    }

    /** Every member of a lex-ordered sorted set (the open-write index of a segment). */
    public List<String> zrange(String key) {
        return redis().zrange(key, 0, -1);
    }

    /**
     * Blocks up to {@code blockMs} for entries after {@code after} on the streams;
     * returns the last id read per stream (streams with nothing new keep theirs).
     */
    public Map<String, StreamEntryID> waitForEvents(Map<String, StreamEntryID> after, int blockMs) {
        Map<String, StreamEntryID> out = new HashMap<>(after);
        List<Map.Entry<String, List<StreamEntry>>> got =
                redis().xread(XReadParams.xReadParams().block(blockMs).count(1000), after);
        if (got != null) {
            for (Map.Entry<String, List<StreamEntry>> e : got) {
                List<StreamEntry> entries = new ArrayList<>(e.getValue());
                if (!entries.isEmpty()) {
                    out.put(e.getKey(), entries.get(entries.size() - 1).getID());
                }
            }
        }
        return out;
    }

    /** The last id of a stream now ("$" as an explicit id), or 0-0 if it has none. */
    public StreamEntryID lastId(String key) {
        var info = redis().xrevrange(key, "+", "-", 1);
        return info.isEmpty() ? new StreamEntryID(0, 0) : info.get(0).getID();
    }

    /** {@code CONFIG GET append*} of the server, or of every primary of a cluster that
     *  answers (keyed by node; "" for a single server): what {@link Persistence} checks.
     *  Replicas are not checked (as by the library); a primary that does not answer
     *  holds the cluster anyway. */
    public Map<String, Map<String, String>> persistence() {
        Map<String, Map<String, String>> out = new TreeMap<>();
        if (!cluster) {
            try (Connection c = ((JedisPooled) redis()).getPool().getResource()) {
                out.put("", new Jedis(c).configGet("append*"));
            }
            return out;
        }
        RuntimeException last = null;
        for (Map.Entry<String, ConnectionPool> node : primaries().entrySet()) {
            try (Connection c = node.getValue().getResource()) {
                out.put(node.getKey(), new Jedis(c).configGet("append*"));
            } catch (RuntimeException e) {
                last = e;
            }
        }
        if (out.isEmpty()) {
            throw last != null ? last : new IllegalStateException("no primary of the Redis Cluster answers");
        }
        return out;
    }

    /** The server process's run id (INFO server): a change means a restart, perhaps
     *  from an older copy of its data, so nothing cached from before holds. */
    public String runId() {
        if (!cluster) {
            return runIdOf(redis().info("server"));
        }
        // every primary's: a restart of any of them may have lost what it held ("?": one
        // that does not answer now, so its coming back is a change too)
        Map<String, String> ids = new TreeMap<>();
        for (Map.Entry<String, ConnectionPool> node : primaries().entrySet()) {
            try (Connection c = node.getValue().getResource()) {
                ids.put(node.getKey(), runIdOf(new Jedis(c).info("server")));
            } catch (RuntimeException e) {
                ids.put(node.getKey(), "?");
            }
        }
        if (ids.values().stream().allMatch("?"::equals)) {
            throw new IllegalStateException("no primary of the Redis Cluster answers");
        }
        return ids.toString();
    }

    /** The cluster's primaries not marked failed, as one answering node's CLUSTER NODES
     *  says, among the nodes the client knows (it also lists replicas, and nodes gone
     *  since its last refresh: asking those would cost a timeout each, every tick). */
    private Map<String, ConnectionPool> primaries() {
        Map<String, ConnectionPool> known = new TreeMap<>(((JedisCluster) redis()).getClusterNodes());
        List<String> order = new ArrayList<>(known.keySet());
        String first = lastAnswering;
        if (first != null && order.remove(first)) {
            order.add(0, first);
        }
        RuntimeException failed = null;
        for (String name : order) {
            String nodes;
            try (Connection c = known.get(name).getResource()) {
                nodes = new Jedis(c).clusterNodes();
            } catch (RuntimeException e) {
                failed = e;
                continue;
            }
            lastAnswering = name;
            Map<String, ConnectionPool> out = new TreeMap<>();
            for (String line : nodes.split("\n")) {
                String[] f = line.strip().split(" ");
                if (f.length < 3 || !f[2].contains("master") || f[2].contains("fail")) {
                    continue;
                }
                String addr = f[1].split("[@,]")[0];
                if (known.containsKey(addr)) {
                    out.put(addr, known.get(addr));
                }
            }
            return out;
        }
        throw failed != null ? failed : new IllegalStateException("the Redis Cluster client knows no node");
    }

    private static String runIdOf(String info) {
        for (String line : info.split("\r?\n")) {
            if (line.startsWith("run_id:")) {
                return line.substring(7).strip();
            }
        }
        return "";
    }

    @Override
    public void close() {
        UnifiedJedis r = client;
        if (r != null) {
            r.close();
        }
    }
}
