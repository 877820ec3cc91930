package io.github.pulsartxn.peer;

import java.io.PrintWriter;
import java.io.StringWriter;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.concurrent.Callable;

/**
 * The measures of one run. A measure that throws is recorded as {@code {"error": ...}}
 * with its cause chain, and the others still run: a peer that cannot do one thing here
 * must still report the rest. {@link #print()} writes one line, {@code PEER-RESULT <json>},
 * for the driver (benchmarks/peer/run) to pick up; progress goes to stderr.
 */
public final class Results {
    private final Map<String, Object> results = new LinkedHashMap<>();

    public Results(String system, Map<String, Object> context) {
        results.put("system", system);
        results.putAll(context);
    }

    public void measure(String name, Callable<Object> body) {
        long t0 = System.nanoTime();
        System.err.printf("[%s] %s ...%n", results.get("system"), name);
        Object value;
        try {
            value = body.call();
        } catch (Throwable t) {
            value = error(t);
        }
        System.err.printf("[%s] %s (%.1f s): %s%n", results.get("system"), name,
                Stats.msSince(t0) / 1000, Json.write(value));
        results.put(name, value);
    }

    public void put(String name, Object value) {
        results.put(name, value);
    }

    public static Map<String, Object> error(Throwable t) {
        Map<String, Object> m = new LinkedHashMap<>();
        m.put("error", describe(t));
        StringWriter sw = new StringWriter();
        t.printStackTrace(new PrintWriter(sw));
        String trace = sw.toString();
        m.put("trace", trace.length() > 4000 ? trace.substring(0, 4000) : trace);
        return m;
    }

    /** {@code Class: message <- Cause: message ...} (the cause chain, one line). */
    public static String describe(Throwable t) {
        StringBuilder sb = new StringBuilder();
        for (Throwable c = t; c != null; c = c.getCause() == c ? null : c.getCause()) {
            if (sb.length() > 0) {
                sb.append(" <- ");
            }
            sb.append(c.getClass().getName()).append(": ").append(c.getMessage());
        }
        return sb.toString();
    }

    public void print() {
        System.out.println("PEER-RESULT " + Json.write(results));
        System.out.flush();
    }
}
