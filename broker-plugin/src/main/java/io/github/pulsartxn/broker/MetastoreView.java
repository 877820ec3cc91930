package io.github.pulsartxn.broker;

import java.util.Map;

/**
 * The reads the classifier makes of the metastore, and nothing else: the plugin reads
 * pulsar-txn's keys and never writes them. A Redis client implements it in the broker,
 * a map of dumped keys in the fixture tests. Every method may throw if the store cannot
 * answer; the caller then holds (fails closed), it never guesses.
 */
public interface MetastoreView {
    /** The hash's fields; empty if the key does not exist. */
    Map<String, String> hgetall(String key);

    /** The sorted set member's score, or null. */
    Double zscore(String key, String member);

    /** The member with the highest score at or below {@code max} (ZREVRANGEBYSCORE key
     *  max -inf LIMIT 0 1), or null. */
    String zlastAtOrBelow(String key, double max);

    boolean sismember(String key, String member);
}
