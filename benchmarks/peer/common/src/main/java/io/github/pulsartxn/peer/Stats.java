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
}
