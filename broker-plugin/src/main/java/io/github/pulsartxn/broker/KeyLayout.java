package io.github.pulsartxn.broker;

import java.nio.charset.StandardCharsets;
import java.util.HashMap;
import java.util.Map;

/**
 * The metastore's key names for one namespace (the Python {@code metastore/keys.py}):
 * every per-partition key starts with the partition's hash tag, {@code {ns:p}} in
 * namespaces created before the layout was recorded ({@code plain}) and
 * {@code {ns~salt}} in every newer one ({@code spread1}), chosen so each tag's Redis
 * Cluster slot lies in the middle of the partition's even slot range.
 */
public final class KeyLayout {
    public static final int SLOTS = 16384;

    private final String ns;
    private final String[] tags;

    public KeyLayout(String ns, int partitions, String layout) {
        if (ns.isEmpty() || ns.indexOf('{') >= 0 || ns.indexOf('}') >= 0) {
            throw new IllegalArgumentException("namespace " + ns + ": empty or has braces");
        }
        if (partitions < 1 || partitions > SLOTS) {
            throw new IllegalArgumentException("partitions must be 1.." + SLOTS + ", got " + partitions);
        }
        this.ns = ns;
        if ("plain".equals(layout)) {
            tags = new String[partitions];
            for (int p = 0; p < partitions; p++) {
                tags[p] = "{" + ns + ":" + p + "}";
            }
        } else if ("spread1".equals(layout)) {
            tags = spreadTags(ns, partitions);
        } else {
            throw new IllegalArgumentException("key layout " + layout + " is unknown to this version");
        }
    }

    /** Equal when every key is: the tick compares the config it reads with the one in
     *  use, and a difference drops every cached verdict. */
    @Override
    public boolean equals(Object o) {
        return o instanceof KeyLayout k && ns.equals(k.ns) && java.util.Arrays.equals(tags, k.tags);
    }

    @Override
    public int hashCode() {
        return 31 * ns.hashCode() + java.util.Arrays.hashCode(tags);
    }

    /** Salts 0, 1, 2, ... each to the partition not yet given one whose middle slot lies
     *  within width/16 of the tag's slot (tried from slot+half down to slot-half). */
    static String[] spreadTags(String ns, int partitions) {
        double width = (double) SLOTS / partitions;
        int half = Math.max(0, (int) (width / 16));
        Map<Integer, Integer> wanted = new HashMap<>();
        for (int p = 0; p < partitions; p++) {
            wanted.put((int) ((p + 0.5) * width), p);
        }
        String[] out = new String[partitions];
        int left = partitions;
        for (long salt = 0; left > 0; salt++) {
            String tag = "{" + ns + "~" + salt + "}";
            int slot = keySlot(tag);
            for (int d = -half; d <= half; d++) {
                Integer p = wanted.get(slot - d);
                if (p != null && out[p] == null) {
                    out[p] = tag;
                    left--;
                    break;
                }
            }
        }
        return out;
    }

    /** Redis Cluster's slot of a key: CRC16 (XMODEM) of its hash tag, or of the key. */
    public static int keySlot(String key) {
        byte[] b = key.getBytes(StandardCharsets.UTF_8);
        int start = 0;
        int end = b.length;
        int open = indexOf(b, (byte) '{', 0);
        if (open >= 0) {
            int close = indexOf(b, (byte) '}', open + 1);
            if (close > open + 1) {
                start = open + 1;
                end = close;
            }
        }
        int crc = 0;
        for (int i = start; i < end; i++) {
            crc ^= (b[i] & 0xff) << 8;
            for (int k = 0; k < 8; k++) {
                crc = (crc & 0x8000) != 0 ? (crc << 1) ^ 0x1021 : crc << 1;
            }
            crc &= 0xffff;
        }
        return crc % SLOTS;
    }

    private static int indexOf(byte[] b, byte c, int from) {
        for (int i = from; i < b.length; i++) {
            if (b[i] == c) {
                return i;
            }
        }
        return -1;
    }

    public static String config(String ns) {
        return ns + ":config";
    }

    public int partitions() {
        return tags.length;
    }

    public String tag(int p) {
        return tags[p];
    }

    public String header(int p, long seq) {
        return tags[p] + ":h:" + seq;
    }

    public String gc(int p) {
        return tags[p] + ":gc";
    }

    public String collected(int p) {
        return tags[p] + ":gcs";
    }

    public String gaps(int p) {
        return tags[p] + ":gaps";
    }

    public String abortedWriters(int p, String segment) {
        return tags[p] + ":ab:" + segment;
    }

    public String openWrites(int p, String segment) {
        return tags[p] + ":ow:" + segment;
    }

    public String events(int p) {
        return tags[p] + ":ev";
    }

    public String namespace() {
        return ns;
    }
}
