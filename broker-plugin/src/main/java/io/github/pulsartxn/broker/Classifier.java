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
    private final boolean waitaof;

    /** ``waitaof``: the store's durability mode, where a decision counts only once its
     *  committer marked it fsynced ({@code fs}); until then it is as if not taken. */
    public Classifier(MetastoreView view, Namespace ns, boolean waitaof) {
        this.view = view;
        this.ns = ns;
        this.waitaof = waitaof;
    }

    public Classifier(MetastoreView view, Namespace ns) {
        this(view, ns, false);
    }

    /** A verdict, and whether it is final: a cache may keep it for good. */
    public record Result(Verdict verdict, boolean isFinal) {
    }

    public Verdict classify(Map<String, String> props, String segment) {
        return classify(EntryTxn.of(props, ns.deployment(), ns.partitions()), segment).verdict();
    }

    public Result classify(EntryTxn e, String segment) {
        switch (e.kind()) {
            case PLAIN:
                return new Result(Verdict.DELIVER, true);
            case NEVER:
                return new Result(Verdict.SKIP, true);
            default:
                break;
        }
        KeyLayout k = ns.keys();
        String headerKey = k.header(e.partition(), e.seq());
        Map<String, String> h = view.hgetall(headerKey);
        if (!h.isEmpty()) {
            String st = h.get("st");
            if ("OPEN".equals(st) || waitaof && !"1".equals(h.get("fs")) && st != null) {
                return new Result(Verdict.WAIT, false);
            }
            if ("ABORTED".equals(st)) {
                return new Result(Verdict.SKIP, true);
            }
            if ("COMMITTED".equals(st)) {
                boolean won = winners(h.get("win"), headerKey).contains(e.writer());
                return new Result(won ? Verdict.DELIVER : Verdict.SKIP, true);
            }
            throw new IllegalStateException(headerKey + ": state " + st + " is unknown to this version");
        }
        if (!collected(e.partition(), e.seq())) {
            // lost with a rollback of the store, or forged; not final: a forged id may be
            // handed out later, and its real entries must not inherit this
            return new Result(Verdict.SKIP, false);
        }
        boolean aborted = view.sismember(k.abortedWriters(e.partition(), segment),
                e.seq() + "|" + e.writer());
        return new Result(aborted ? Verdict.SKIP : Verdict.DELIVER, true);
    }

    /** Whether the transaction has ended for the gate: decided (and, under waitaof,
     *  marked fsynced), or its header gone (collected, or never this store's). */
    public boolean ended(int p, long seq) {
        Map<String, String> h = view.hgetall(ns.keys().header(p, seq));
        if (h.isEmpty()) {
            return true;
        }
        String st = h.get("st");
        return !"OPEN".equals(st) && (!waitaof || "1".equals(h.get("fs")));
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
