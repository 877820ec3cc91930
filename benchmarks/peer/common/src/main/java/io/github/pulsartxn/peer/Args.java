package io.github.pulsartxn.peer;

import java.util.HashMap;
import java.util.Map;

/** {@code --name value} and bare {@code --flag} arguments. */
public final class Args {
    private final Map<String, String> values = new HashMap<>();

    public static Args parse(String[] argv) {
        Args a = new Args();
        for (int i = 0; i < argv.length; i++) {
            String k = argv[i];
            if (!k.startsWith("--")) {
                throw new IllegalArgumentException("unexpected argument " + k);
            }
            boolean hasValue = i + 1 < argv.length && !argv[i + 1].startsWith("--");
            a.values.put(k.substring(2), hasValue ? argv[++i] : "true");
        }
        return a;
    }

    public String str(String name) {
        String v = values.get(name);
        if (v == null) {
            throw new IllegalArgumentException("missing --" + name);
        }
        return v;
    }

    public String str(String name, String dflt) {
        return values.getOrDefault(name, dflt);
    }

    public int integer(String name, int dflt) {
        return values.containsKey(name) ? Integer.parseInt(values.get(name)) : dflt;
    }

    public boolean flag(String name) {
        return Boolean.parseBoolean(values.getOrDefault(name, "false"));
    }

    /** Whether measure {@code name} was asked for ({@code --only a,b}; default: all). */
    public boolean wants(String name) {
        String only = values.get("only");
        if (only == null) {
            return true;
        }
        for (String s : only.split(",")) {
            if (s.trim().equals(name)) {
                return true;
            }
        }
        return false;
    }
}
