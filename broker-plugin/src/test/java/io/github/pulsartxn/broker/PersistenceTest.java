package io.github.pulsartxn.broker;

import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.Map;
import org.junit.jupiter.api.Test;

/** The plugin holds on the servers the library refuses, and only on those. */
class PersistenceTest {
    private static final Map<String, String> ALWAYS = Map.of("appendonly", "yes", "appendfsync", "always");
    private static final Map<String, String> EVERYSEC = Map.of("appendonly", "yes", "appendfsync", "everysec");
    private static final Map<String, String> NO_AOF = Map.of("appendonly", "no", "appendfsync", "always");

    @Test
    void strictNeedsAofWithAnFsyncPerWriteOnEveryNode() {
        assertNull(Persistence.problem("strict", Map.of("", ALWAYS)));
        assertTrue(Persistence.problem("strict", Map.of("", EVERYSEC)).contains("appendfsync is 'everysec'"));
        String p = Persistence.problem("strict", Map.of("a:1", ALWAYS, "b:2", NO_AOF));
        assertTrue(p.contains("without AOF") && p.contains("b:2") && p.contains(PluginConfig.URL), p);
    }

    @Test
    void waitaofNeedsAofAndRelaxedNothing() {
        assertNull(Persistence.problem("waitaof", Map.of("", EVERYSEC)));
        assertTrue(Persistence.problem("waitaof", Map.of("", NO_AOF)).contains("without AOF"));
        assertNull(Persistence.problem("relaxed", Map.of("", NO_AOF)));
    }
}
