package io.github.pulsartxn.broker;

import java.util.Map;

/**
 * The library's persistence check (metastore/redis_url.py, docs/durability.md), made by
 * the plugin too: a verdict it caches is final only if the decision it read cannot be
 * lost. {@code strict} needs AOF with {@code appendfsync always} on every node;
 * {@code waitaof} needs AOF (each decision waits for its fsync); {@code relaxed} checks
 * nothing. Checked every tick, not once: a server reconfigured at runtime holds the
 * governed topics until it is put back.
 */
final class Persistence {
    private Persistence() {
    }

    /** What is wrong with the nodes' settings ({@code CONFIG GET append*} per node, keyed
     *  by node; "" for a single server), or null when they match {@code durability}. */
    static String problem(String durability, Map<String, Map<String, String>> nodes) {
        if (durability.equals("relaxed")) {
            return null;
        }
        String hint = "; put it back, or add ?durability=relaxed to " + PluginConfig.URL
                + " (lost decisions come back as unknown: never shown), see docs/durability.md";
        for (Map.Entry<String, Map<String, String>> n : nodes.entrySet()) {
            String where = n.getKey().isEmpty() ? "" : " (cluster node " + n.getKey() + ")";
            Map<String, String> cfg = n.getValue();
            if (!"yes".equals(cfg.get("appendonly"))) {
                return "the server" + where + " runs without AOF (appendonly " + cfg.get("appendonly") + ")"
                        + hint;
            }
            if (durability.equals("strict") && !"always".equals(cfg.get("appendfsync"))) {
                return "appendfsync is '" + cfg.get("appendfsync") + "'" + where
                        + ", so an acknowledged commit can be lost (durability=strict needs always)" + hint;
            }
        }
        return null;
    }
}
