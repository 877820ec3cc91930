package io.github.pulsartxn.broker;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.IOException;
import java.io.InputStream;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.stream.Stream;
import org.junit.jupiter.api.DynamicTest;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestFactory;

/**
 * The classifier against the fixtures the Python readers pass too
 * (tests/fixtures/classification.json, written by the real Python roles on a real
 * Redis): the two implementations of the rule cannot drift apart unnoticed.
 */
class ClassifierFixturesTest {

    /** The dumped keys of one namespace, answering as Redis would. */
    static final class DumpView implements MetastoreView {
        final Map<String, Map<String, String>> hashes = new HashMap<>();
        final Map<String, Set<String>> sets = new HashMap<>();
        final Map<String, TreeMap<Double, List<String>>> zsets = new HashMap<>();
        final Map<String, Map<String, Double>> scores = new HashMap<>();

        DumpView(JsonNode keys) {
            keys.fields().forEachRemaining(kv -> {
                JsonNode v = kv.getValue();
                String key = kv.getKey();
                if (v.has("hash")) {
                    Map<String, String> h = new HashMap<>();
                    v.get("hash").fields().forEachRemaining(f -> h.put(f.getKey(), f.getValue().asText()));
                    hashes.put(key, h);
                } else if (v.has("set")) {
                    Set<String> s = new HashSet<>();
                    v.get("set").forEach(m -> s.add(m.asText()));
                    sets.put(key, s);
                } else if (v.has("zset")) {
                    TreeMap<Double, List<String>> z = new TreeMap<>();
                    Map<String, Double> sc = new HashMap<>();
                    v.get("zset").forEach(ms -> {
                        z.computeIfAbsent(ms.get(1).asDouble(), x -> new ArrayList<>()).add(ms.get(0).asText());
                        sc.put(ms.get(0).asText(), ms.get(1).asDouble());
                    });
                    zsets.put(key, z);
                    scores.put(key, sc);
                }
            });
        }

        @Override
        public Map<String, String> hgetall(String key) {
            return hashes.getOrDefault(key, Map.of());
        }

        @Override
        public Double zscore(String key, String member) {
            return scores.getOrDefault(key, Map.of()).get(member);
        }

        @Override
        public String zlastAtOrBelow(String key, double max) {
            var e = zsets.getOrDefault(key, new TreeMap<>()).floorEntry(max);
            if (e == null) {
                return null;
            }
            List<String> ms = new ArrayList<>(e.getValue());
            ms.sort(null); // equal scores: Redis orders by member, and REV takes the last
            return ms.get(ms.size() - 1);
        }

        @Override
        public boolean sismember(String key, String member) {
            return sets.getOrDefault(key, Set.of()).contains(member);
        }
    }

    static JsonNode fixtures() throws IOException {
        try (InputStream in = ClassifierFixturesTest.class.getResourceAsStream("/classification.json")) {
            if (in == null) {
                throw new IOException("classification.json is not on the test classpath");
            }
            return new ObjectMapper().readTree(in);
        }
    }

    @TestFactory
    Stream<DynamicTest> classifiesEachSharedFixtureAsItExpects() throws IOException {
        List<DynamicTest> tests = new ArrayList<>();
        for (JsonNode ns : fixtures().get("namespaces")) {
            DumpView view = new DumpView(ns.get("keys"));
            Namespace namespace = Namespace.read(view, ns.get("namespace").asText());
            Classifier c = new Classifier(view, namespace);
            for (JsonNode k : ns.get("cases")) {
                Map<String, String> props = new HashMap<>();
                k.get("properties").fields().forEachRemaining(f -> props.put(f.getKey(), f.getValue().asText()));
                String name = ns.get("namespace").asText() + ": " + k.get("name").asText();
                tests.add(DynamicTest.dynamicTest(name, () -> assertEquals(
                        Verdict.valueOf(k.get("expected").asText().toUpperCase()),
                        c.classify(props, k.get("segment").asText()), name)));
            }
        }
        return tests.stream();
    }

    @TestFactory
    Stream<DynamicTest> computesTheFixturesPartitionTags() throws IOException {
        List<DynamicTest> tests = new ArrayList<>();
        for (JsonNode ns : fixtures().get("namespaces")) {
            tests.add(DynamicTest.dynamicTest(ns.get("namespace").asText(), () -> {
                KeyLayout k = new KeyLayout(ns.get("namespace").asText(), ns.get("partitions").asInt(),
                        ns.get("layout").asText());
                List<String> got = new ArrayList<>();
                for (int p = 0; p < k.partitions(); p++) {
                    got.add(k.tag(p));
                }
                List<String> want = new ArrayList<>();
                ns.get("tags").forEach(t -> want.add(t.asText()));
                assertEquals(want, got);
            }));
        }
        return tests.stream();
    }

    @Test
    void keySlotIsRedisClusters() {
        assertEquals(12182, KeyLayout.keySlot("foo"));
        assertEquals(12739, KeyLayout.keySlot("123456789"));
        assertEquals(KeyLayout.keySlot("bar"), KeyLayout.keySlot("{bar}.x"));
        assertEquals(KeyLayout.keySlot("{}x"), KeyLayout.keySlot("{}x")); // empty tag: whole key
    }

    @Test
    void spreadTagsOfSixteenPartitionsMatchPython() {
        // Keys("ptxn", 16, "spread1") in metastore/keys.py, the default namespace
        KeyLayout k = new KeyLayout("ptxn", 16, "spread1");
        for (int p = 0; p < 16; p++) {
            int slot = KeyLayout.keySlot(k.tag(p));
            int mid = (int) ((p + 0.5) * 1024);
            assertEquals(true, Math.abs(slot - mid) <= 64, k.tag(p) + " slot " + slot);
        }
    }

    @Test
    void winnersAreAJsonArrayOrRefused() {
        assertEquals(List.of("a", "b\"c"), Classifier.winners("[\"a\", \"b\\\"c\"]", "h"));
        assertEquals(List.of(), Classifier.winners("[]", "h"));
        assertEquals(List.of(), Classifier.winners(null, "h"));
        assertThrows(IllegalStateException.class, () -> Classifier.winners("[\"a\"", "h"));
        assertThrows(IllegalStateException.class, () -> Classifier.winners("[1]", "h"));
        assertThrows(IllegalStateException.class, () -> Classifier.winners("{}", "h"));
    }

    @Test
    void aNamespaceThatDoesNotExistIsRefusedNamed() {
        var e = assertThrows(IllegalStateException.class,
                () -> Namespace.read(new DumpView(new ObjectMapper().createObjectNode()), "nope"));
        assertEquals(true, e.getMessage().contains("'nope'"), e.getMessage());
    }
}
