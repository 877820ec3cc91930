package io.github.pulsartxn.broker;

import java.net.URI;
import java.net.URISyntaxException;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import redis.clients.jedis.JedisPooled;
import redis.clients.jedis.StreamEntryID;
import redis.clients.jedis.params.XReadParams;
import redis.clients.jedis.resps.StreamEntry;

/**
 * The metastore as the plugin reads it: pulsar-txn's keys on one Redis server (a
 * {@code redis://} or {@code rediss://} URL with the library's query options, which
 * the plugin ignores). Read only: the plugin never writes a protocol key.
 */
public final class RedisMetastore implements MetastoreView, AutoCloseable {
    private final JedisPooled redis;

    public RedisMetastore(String url) {
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
        URI bare;
        try {
            bare = new URI(u.getScheme() + "://" + (u.getRawUserInfo() == null ? "" : u.getRawUserInfo() + "@")
                    + u.getHost() + ":" + (u.getPort() < 0 ? 6379 : u.getPort()) + path);
        } catch (URISyntaxException e) {
            throw new IllegalArgumentException(shown + " is not a URL");
        }
        this.redis = new JedisPooled(bare);
    }

    @Override
    public Map<String, String> hgetall(String key) {
        return redis.hgetAll(key);
    }

    @Override
    public Double zscore(String key, String member) {
        return redis.zscore(key, member);
    }

    @Override
    public String zlastAtOrBelow(String key, double max) {
        List<String> got = redis.zrevrangeByScore(key, max, Double.NEGATIVE_INFINITY, 0, 1);
        return got.isEmpty() ? null : got.get(0);
    }

    @Override
    public boolean sismember(String key, String member) {
        return redis.sismember(key, member);
    }

    /** Every member of a lex-ordered sorted set (the open-write index of a segment). */
    public List<String> zrange(String key) {
        return redis.zrange(key, 0, -1);
    }

    /**
     * Blocks up to {@code blockMs} for entries after {@code after} on the streams;
     * returns the last id read per stream (streams with nothing new keep theirs).
     */
    public Map<String, StreamEntryID> waitForEvents(Map<String, StreamEntryID> after, int blockMs) {
        Map<String, StreamEntryID> out = new HashMap<>(after);
        List<Map.Entry<String, List<StreamEntry>>> got =
                redis.xread(XReadParams.xReadParams().block(blockMs).count(1000), after);
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
        var info = redis.xrevrange(key, "+", "-", 1);
        return info.isEmpty() ? new StreamEntryID(0, 0) : info.get(0).getID();
    }

    /** The server process's run id (INFO server): a change means a restart, perhaps
     *  from an older copy of its data, so nothing cached from before holds. */
    public String runId() {
        for (String line : redis.info("server").split("\r?\n")) {
            if (line.startsWith("run_id:")) {
                return line.substring(7).strip();
            }
        }
        return "";
    }

    @Override
    public void close() {
        redis.close();
    }
}
