package io.github.pulsartxn.broker;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;

/**
 * Step 3 of the rule (docs/durability.md, "Who gets these guarantees"): an entry's
 * verdict from its properties and the metastore's records, as the Python readers
 * decide it ({@code TransactionBuffer.classify}). Stateless and uncached: the plugin
 * keeps final verdicts itself. Fail closed throughout: what is not known to be a
 * committed winner, or collected and not listed aborted, is never delivered.
 */
public final class Classifier {
    private final MetastoreView view;
    private final Namespace ns;

    public Classifier(MetastoreView view, Namespace ns) {
        this.view = view;
        this.ns = ns;
    }

    public Verdict classify(Map<String, String> props, String segment) {
        EntryTxn e = EntryTxn.of(props, ns.deployment(), ns.partitions());
        switch (e.kind()) {
            case PLAIN:
                return Verdict.DELIVER;
            case NEVER:
                return Verdict.SKIP;
            default:
                break;
        }
        KeyLayout k = ns.keys();
        String headerKey = k.header(e.partition(), e.seq());
        Map<String, String> h = view.hgetall(headerKey);
        if (!h.isEmpty()) {
            String st = h.get("st");
            if ("OPEN".equals(st)) {
                return Verdict.WAIT;
            }
            if ("ABORTED".equals(st)) {
                return Verdict.SKIP;
            }
            if ("COMMITTED".equals(st)) {
                return winners(h.get("win"), headerKey).contains(e.writer())
                        ? Verdict.DELIVER : Verdict.SKIP;
            }
            throw new IllegalStateException(headerKey + ": state " + st + " is unknown to this version");
        }
        if (!collected(e.partition(), e.seq())) {
            return Verdict.SKIP; // lost with a rollback of the store, or foreign
        }
        boolean aborted = view.sismember(k.abortedWriters(e.partition(), segment),
                e.seq() + "|" + e.writer());
        return aborted ? Verdict.SKIP : Verdict.DELIVER;
    }

    /** In the collected set, or at or below the watermark and in no gap of possibly lost ids. */
    private boolean collected(int p, long seq) {
        KeyLayout k = ns.keys();
        if (view.zscore(k.collected(p), Long.toString(seq)) != null) {
            return true;
        }
        String w = view.hgetall(k.gc(p)).get("w");
        if (w == null || seq > Long.parseLong(w)) {
            return false;
        }
        String gap = view.zlastAtOrBelow(k.gaps(p), (double) seq);
        if (gap == null) {
            return true;
        }
        long last = Long.parseLong(gap.substring(gap.indexOf(':') + 1));
        return last < seq;
    }

    /** The header's {@code win}: a JSON array of writer ids (absent: none). */
    static List<String> winners(String json, String key) {
        List<String> out = new ArrayList<>();
        if (json == null || json.isEmpty()) {
            return out;
        }
        String s = json.strip();
        if (s.length() < 2 || s.charAt(0) != '[' || s.charAt(s.length() - 1) != ']') {
            throw new IllegalStateException(key + ": winners " + json + " are not a JSON array");
        }
        int i = skip(s, 1);
        if (s.charAt(i) == ']') {
            return out;
        }
        while (true) {
            StringBuilder b = new StringBuilder();
            i = string(s, i, b, key);
            out.add(b.toString());
            i = skip(s, i);
            char c = s.charAt(i);
            if (c == ']' && i == s.length() - 1) {
                return out;
            }
            if (c != ',') {
                throw new IllegalStateException(key + ": winners " + json + " are not a JSON array");
            }
            i = skip(s, i + 1);
        }
    }

    private static int skip(String s, int i) {
        while (i < s.length() && " \t\r\n".indexOf(s.charAt(i)) >= 0) {
            i++;
        }
        if (i >= s.length()) {
            throw new IllegalStateException("winners " + s + " end early");
        }
        return i;
    }

    private static int string(String s, int i, StringBuilder b, String key) {
        if (s.charAt(i) != '"') {
            throw new IllegalStateException(key + ": winners " + s + " hold a non-string");
        }
        for (i++; i < s.length(); i++) {
            char c = s.charAt(i);
            if (c == '"') {
                return i + 1;
            }
            if (c != '\\') {
                b.append(c);
                continue;
            }
            char e = s.charAt(++i);
            switch (e) {
                case '"', '\\', '/' -> b.append(e);
                case 'b' -> b.append('\b');
                case 'f' -> b.append('\f');
                case 'n' -> b.append('\n');
                case 'r' -> b.append('\r');
                case 't' -> b.append('\t');
                case 'u' -> {
                    b.append((char) Integer.parseInt(s.substring(i + 1, i + 5), 16));
                    i += 4;
                }
                default -> throw new IllegalStateException(key + ": winners " + s + " hold a bad escape");
            }
        }
        throw new IllegalStateException(key + ": winners " + s + " hold an unterminated string");
    }
}
