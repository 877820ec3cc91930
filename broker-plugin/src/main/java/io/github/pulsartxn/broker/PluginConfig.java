package io.github.pulsartxn.broker;

import java.net.URI;
import java.net.URISyntaxException;
import java.net.URLDecoder;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;

/**
 * The plugin's settings, read from the broker's own configuration file (every key of
 * broker.conf / standalone.conf reaches {@code ServiceConfiguration.getProperties()}).
 * The metastore URL may carry a password: {@link #shownUrl()} is the only form that
 * ever reaches a log or an error.
 */
public record PluginConfig(String metastoreUrl, String metastoreNamespace, List<String> pulsarNamespaces,
                           String exemptPrefix, int cacheSize, String durability, Path passwordFile) {

    public static final String URL = "ptxn.metastoreUrl";
    public static final String NAMESPACE = "ptxn.metastoreNamespace";
    public static final String GOVERNED = "ptxn.pulsarNamespaces";
    public static final String EXEMPT = "ptxn.exemptSubscriptionPrefix";
    public static final String CACHE = "ptxn.verdictCacheSize";
    public static final String PASSWORD_FILE = "ptxn.metastorePasswordFile";

    public static PluginConfig from(Properties p) {
        String url = p.getProperty(URL, "").strip();
        if (url.isEmpty()) {
            throw new IllegalArgumentException("pulsar-txn broker plugin: set " + URL
                    + " (the metastore's redis://, rediss:// or redis+cluster:// URL, as the library's metastore.url)");
        }
        String governed = p.getProperty(GOVERNED, "").strip();
        if (governed.isEmpty()) {
            throw new IllegalArgumentException("pulsar-txn broker plugin: set " + GOVERNED
                    + " (the Pulsar namespaces whose topics pulsar-txn writes, e.g. public/default)");
        }
        List<String> namespaces = Arrays.stream(governed.split(",")).map(String::strip)
                .filter(s -> !s.isEmpty()).toList();
        for (String ns : namespaces) {
            if (ns.split("/").length != 2) {
                throw new IllegalArgumentException("pulsar-txn broker plugin: " + GOVERNED + " entry '"
                        + ns + "' is not tenant/namespace");
            }
        }
        int cache;
        try {
            cache = Integer.parseInt(p.getProperty(CACHE, "200000").strip());
        } catch (NumberFormatException e) {
            throw new IllegalArgumentException("pulsar-txn broker plugin: " + CACHE + " must be a number, got '"
                    + p.getProperty(CACHE) + "'");
        }
        // the library's URL options: ?namespace= names the metastore namespace as
        // ptxn.metastoreNamespace does (both given: they must agree); ?durability=waitaof
        // makes a decision final only once its committer marked it fsynced
        Map<String, String> q = query(url);
        String ns = p.getProperty(NAMESPACE, "").strip();
        String fromUrl = q.getOrDefault("namespace", "");
        if (!ns.isEmpty() && !fromUrl.isEmpty() && !ns.equals(fromUrl)) {
            throw new IllegalArgumentException("pulsar-txn broker plugin: " + NAMESPACE + " '" + ns
                    + "' and the namespace in " + URL + " '" + fromUrl + "' differ");
        }
        ns = !ns.isEmpty() ? ns : !fromUrl.isEmpty() ? fromUrl : "ptxn";
        String durability = q.getOrDefault("durability", "strict");
        if (!List.of("strict", "waitaof", "relaxed").contains(durability)) {
            throw new IllegalArgumentException("pulsar-txn broker plugin: durability '" + durability
                    + "' in " + URL + " is not strict, waitaof or relaxed");
        }
        String passwordFile = p.getProperty(PASSWORD_FILE, "").strip();
        return new PluginConfig(url, ns, namespaces, p.getProperty(EXEMPT, "__ptxn").strip(), cache,
                durability, passwordFile.isEmpty() ? null : Path.of(passwordFile));
    }

    static Map<String, String> query(String url) {
        Map<String, String> out = new HashMap<>();
        int q = url.indexOf('?');
        if (q < 0) {
            return out;
        }
        for (String kv : url.substring(q + 1).split("&")) {
            int eq = kv.indexOf('=');
            if (eq > 0) {
                try {
                    out.put(URLDecoder.decode(kv.substring(0, eq), StandardCharsets.UTF_8),
                            URLDecoder.decode(kv.substring(eq + 1), StandardCharsets.UTF_8));
                } catch (IllegalArgumentException e) { // its text quotes the bad characters
                    throw new IllegalArgumentException("pulsar-txn broker plugin: " + URL + " " + redact(url)
                            + ": a query option is not percent-encoded correctly");
                }
            }
        }
        return out;
    }

    /** ?durability=waitaof: a decision counts only once its committer marked it fsynced. */
    public boolean waitaof() {
        return durability.equals("waitaof");
    }

    /** Never the URL itself: a record's own toString would show its password. */
    @Override
    public String toString() {
        return "PluginConfig[" + shownUrl() + ", namespace " + metastoreNamespace + ", governing "
                + pulsarNamespaces + "]";
    }

    /** The URL without its credentials. */
    public String shownUrl() {
        return redact(metastoreUrl);
    }

    /** Scheme, host, port and path only: userinfo (whatever its characters) and the
     *  query (a ?password=) never appear. */
    static String redact(String url) {
        int s = url.indexOf("://");
        if (s < 0) {
            return "<not a URL>";
        }
        if (url.substring(0, s).endsWith("+cluster")) {
            return redactCluster(url, s + 3);
        }
        try { // as the connection reads it: a query may hold '@' too (?password=a@b)
            URI u = new URI(url);
            // an '@' the URI did not take for the userinfo's end (a password holding '/',
            // '?' or '#': "redis://u:20/x@host" reads as host u, port 20): nothing of it is
            // shown, not even a port that may be a password's first digits
            if (url.indexOf('@') >= 0 && u.getRawUserInfo() == null) {
                return url.substring(0, s + 3) + "<hidden>";
            }
            if (u.getHost() != null) {
                return u.getScheme() + "://" + (u.getRawUserInfo() != null ? "***@" : "") + u.getHost()
                        + (u.getPort() >= 0 ? ":" + u.getPort() : "")
                        + (u.getRawPath() == null ? "" : u.getRawPath()) + (u.getRawQuery() != null ? "?…" : "");
            }
        } catch (URISyntaxException e) {
            // not a URI: the text alone, as below
        }
        String rest = url.substring(s + 3);
        int at = rest.lastIndexOf('@'); // a password may hold '/', '?', '#' or '@'
        String host = at >= 0 ? rest.substring(at + 1) : rest;
        int q = host.indexOf('?');
        String hidden = (at >= 0 ? "***@" : "") + (q >= 0 ? host.substring(0, q) : host);
        return url.substring(0, s + 3) + hidden + (q >= 0 ? "?…" : "");
    }

    /** A seed list (h:p,h:p) is no URI authority: read as the connection reads it (the
     *  authority ends at the first '/', '?' or '#'); an '@' past it hides everything. */
    private static String redactCluster(String url, int start) {
        int end = authorityEnd(url, start);
        String authority = url.substring(start, end);
        String rest = url.substring(end);
        if (rest.indexOf('@') >= 0) {
            return url.substring(0, start) + "<hidden>";
        }
        int at = authority.lastIndexOf('@');
        int q = rest.indexOf('?');
        return url.substring(0, start) + (at >= 0 ? "***@" : "") + authority.substring(at + 1)
                + (q >= 0 ? rest.substring(0, q) + "?…" : rest);
    }

    /** Where the authority that begins at {@code start} ends: the first '/', '?' or '#'
     *  (as the library's URL parser reads a seed list). */
    static int authorityEnd(String url, int start) {
        int end = start;
        while (end < url.length() && "/?#".indexOf(url.charAt(end)) < 0) {
            end++;
        }
        return end;
    }

    /** Whether a topic (persistent://tenant/ns/name) is one pulsar-txn's rule governs. */
    public boolean governs(String topic) {
        int s = topic.indexOf("://");
        if (s < 0 || !topic.startsWith("persistent")) {
            return false;
        }
        String rest = topic.substring(s + 3);
        int last = rest.lastIndexOf('/');
        return last > 0 && pulsarNamespaces.contains(rest.substring(0, last));
    }
}
