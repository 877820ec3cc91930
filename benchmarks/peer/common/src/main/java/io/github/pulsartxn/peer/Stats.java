package io.github.pulsartxn.peer;

import java.util.ArrayList;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/** Percentiles computed the way benchmarks/bench_core.py computes them (nearest rank). */
public final class Stats {
    private Stats() {
    }

    public static double pct(List<Double> xs, double q) {
        List<Double> s = new ArrayList<>(xs);
        Collections.sort(s);
        return s.get(Math.min(s.size() - 1, (int) (q * s.size())));
    }

    /** Millisecond samples as {n, p50_ms, p99_ms, mean_ms}. */
    public static Map<String, Object> latency(List<Double> ms) {
        Map<String, Object> m = new LinkedHashMap<>();
        m.put("n", ms.size());
        m.put("p50_ms", round(pct(ms, 0.5)));
        m.put("p99_ms", round(pct(ms, 0.99)));
        m.put("mean_ms", round(ms.stream().mapToDouble(Double::doubleValue).average().orElse(0)));
        return m;
    }

    /** {@link #latency} plus the p50 of the first and of the last quarter (drift). */
    public static Map<String, Object> latencyWithDrift(List<Double> ms) {
        Map<String, Object> m = latency(ms);
        int q = Math.max(1, ms.size() / 4);
        m.put("p50_first_quarter_ms", round(pct(ms.subList(0, q), 0.5)));
        m.put("p50_last_quarter_ms", round(pct(ms.subList(ms.size() - q, ms.size()), 0.5)));
        return m;
    }

    /** A 100-byte payload that names its repetition ("r17-xxx..."). */
    public static byte[] tagged(int rep) {
        byte[] b = new byte[100];
        java.util.Arrays.fill(b, (byte) 'x');
        byte[] tag = ("r" + rep + "-").getBytes(java.nio.charset.StandardCharsets.US_ASCII);
        System.arraycopy(tag, 0, b, 0, tag.length);
        return b;
    }

    public static boolean isTagged(byte[] data, int rep) {
        return java.util.Arrays.equals(data, tagged(rep));
    }

    public static double round(double v) {
        return Math.round(v * 1000.0) / 1000.0;
    }

    public static double msSince(long t0) {
        return (System.nanoTime() - t0) / 1e6;
    }

    /**
     * Consume-transform-produce: (messages per transaction, input messages) pairs from
     * {@code --ctp-plan 1:2000,100:50000,...} (the driver computes them, as ptxn.py does).
     */
    public static List<int[]> ctpPlan(String plan) {
        List<int[]> out = new ArrayList<>();
        for (String pair : plan.split(",")) {
            String[] kv = pair.trim().split(":");
            out.add(new int[] {Integer.parseInt(kv[0]), Integer.parseInt(kv[1])});
        }
        return out;
    }

    /** A unique 100-byte value {@code <prefix>-<i>-xxx...} (as ptxn.ctp_value). */
    public static byte[] ctpValue(String prefix, int i) {
        byte[] b = new byte[100];
        java.util.Arrays.fill(b, (byte) 'x');
        byte[] tag = (prefix + "-" + i + "-").getBytes(java.nio.charset.StandardCharsets.US_ASCII);
        System.arraycopy(tag, 0, b, 0, tag.length);
        return b;
    }

    /** The transform: {@code in-<i>-...} becomes {@code out-<i>-...}. */
    public static byte[] ctpTransform(byte[] in) {
        String s = new String(in, java.nio.charset.StandardCharsets.US_ASCII);
        return ("out" + s.substring(2)).getBytes(java.nio.charset.StandardCharsets.US_ASCII);
    }

    public static int ctpIndex(byte[] data) {
        String s = new String(data, java.nio.charset.StandardCharsets.US_ASCII);
        return Integer.parseInt(s.split("-", 3)[1]);
    }

    /** Exactly once: each of the n inputs in the output once, none left on the input. */
    public static Map<String, Object> ctpVerdict(int n, Map<Integer, Integer> seen, int again) {
        int missing = 0;
        for (int i = 0; i < n; i++) {
            if (!seen.containsKey(i)) {
                missing++;
            }
        }
        int dups = 0;
        int unexpected = 0;
        for (Map.Entry<Integer, Integer> e : seen.entrySet()) {
            dups += Math.max(0, e.getValue() - 1);
            if (e.getKey() < 0 || e.getKey() >= n) {
                unexpected++;
            }
        }
        Map<String, Object> m = new LinkedHashMap<>();
        m.put("output_missing", missing);
        m.put("output_duplicates", dups);
        m.put("output_unexpected", unexpected);
        m.put("input_redelivered", again);
        m.put("exactly_once", missing == 0 && dups == 0 && unexpected == 0 && again == 0);
        return m;
    }

    /** {@link #latency} without its n: the commit figures of a consume-transform-produce run. */
    public static Map<String, Object> commits(List<Double> ms) {
        Map<String, Object> m = latency(ms);
        m.put("commits", m.remove("n"));
        return m;
    }
}
