package io.github.pulsartxn.broker;

import java.util.Map;
import java.util.regex.Pattern;

/**
 * The protocol properties of one entry, read as step 3 of the rule reads them: a plain
 * entry, an entry never to deliver (another deployment, malformed, an id no store can
 * have handed out), or a transaction's (partition, seq) and writer.
 *
 * <p>Anyone can write these properties, so nothing here throws: every value is one of
 * the three kinds (the Python readers' {@code records.entry_txn} and {@code TxnId.parse}).
 */
public record EntryTxn(Kind kind, int partition, long seq, String writer) {

    public enum Kind { PLAIN, NEVER, TXN }

    public static final String PROP_TXN = "__ptxn.txn";
    public static final String PROP_WRITER = "__ptxn.writer";
    public static final String PROP_DEPLOYMENT = "__ptxn.dep";

    static final EntryTxn PLAIN = new EntryTxn(Kind.PLAIN, -1, -1, "");
    static final EntryTxn NEVER = new EntryTxn(Kind.NEVER, -1, -1, "");

    // canonical text only: an alias of a real id ("v5:01:7") must not name that id
    private static final Pattern TXN_ID = Pattern.compile("v5:(0|[1-9][0-9]{0,4}):(0|[1-9][0-9]{0,18})");
    private static final Pattern WRITER_ID = Pattern.compile("[A-Za-z0-9_.:\\-]{1,200}");

    /** The entry as the namespace of {@code deployment} with {@code partitions} reads it. */
    public static EntryTxn of(Map<String, String> props, String deployment, int partitions) {
        String tag = props.get(PROP_TXN);
        if (tag == null) {
            return PLAIN;
        }
        String id;
        String writer;
        if (tag.indexOf(';') >= 0) {
            String[] parts = tag.split(";", -1);
            if (parts.length != 3 || props.containsKey(PROP_WRITER)
                    || props.containsKey(PROP_DEPLOYMENT)) {
                return NEVER; // malformed, or both forms at once: trust neither
            }
            if (!WRITER_ID.matcher(parts[1]).matches() || !parts[2].equals(deployment)) {
                return NEVER;
            }
            id = parts[0];
            writer = parts[1];
        } else {
            // the three-property form; its oldest entries carry no deployment: this one's
            if (!props.getOrDefault(PROP_DEPLOYMENT, deployment).equals(deployment)) {
                return NEVER;
            }
            id = tag;
            writer = props.getOrDefault(PROP_WRITER, "");
        }
        var m = TXN_ID.matcher(id);
        if (!m.matches()) {
            return NEVER;
        }
        int p = Integer.parseInt(m.group(1));
        long seq;
        try {
            seq = Long.parseLong(m.group(2));
        } catch (NumberFormatException e) {
            return NEVER; // above 2^63 - 1: Redis' INCR never hands it out
        }
        if (p >= partitions || seq < 1) {
            return NEVER;
        }
        return new EntryTxn(Kind.TXN, p, seq, writer);
    }
}
