package io.github.pulsartxn.broker;

import java.util.Map;

/**
 * Step 1 of the rule: a pulsar-txn namespace as its config hash records it, read once.
 * A namespace that does not exist (a typo, another store) or whose key layout this
 * version does not know is refused, never guessed: the plugin then holds its topics.
 */
public record Namespace(String name, int partitions, KeyLayout keys, String deployment) {

    public static Namespace read(MetastoreView view, String ns) {
        Namespace got = readIfExists(view, ns);
        if (got == null) {
            throw new IllegalStateException("pulsar-txn namespace '" + ns
                    + "' does not exist in the metastore (no " + KeyLayout.config(ns) + ")");
        }
        return got;
    }

    /** Null while the namespace does not exist: then no transaction can have registered
     *  a write, so there is nothing to hold back and nothing to deliver as one's. */
    public static Namespace readIfExists(MetastoreView view, String ns) {
        Map<String, String> cfg = view.hgetall(KeyLayout.config(ns));
        String partitions = cfg.get("partitions");
        if (partitions == null) {
            return null;
        }
        int p = Integer.parseInt(partitions);
        // spread namespaces hold a value no earlier reader accepts in 'deployment'
        String dep = cfg.getOrDefault("dep", cfg.get("deployment"));
        if (dep == null) {
            throw new IllegalStateException("pulsar-txn namespace '" + ns + "' has no deployment id");
        }
        String layout = cfg.getOrDefault("tags", "plain");
        return new Namespace(ns, p, new KeyLayout(ns, p, layout), dep);
    }
}
