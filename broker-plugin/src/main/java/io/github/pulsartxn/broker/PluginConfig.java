package io.github.pulsartxn.broker;

import java.net.URI;
import java.util.Arrays;
import java.util.List;
import java.util.Properties;

/**
 * The plugin's settings, read from the broker's own configuration file (every key of
 * broker.conf / standalone.conf reaches {@code ServiceConfiguration.getProperties()}).
 * The metastore URL may carry a password: {@link #shownUrl()} is the only form that
 * ever reaches a log or an error.
 */
public record PluginConfig(String metastoreUrl, String metastoreNamespace, List<String> pulsarNamespaces,
                           String exemptPrefix, int cacheSize) {

    public static final String URL = "ptxn.metastoreUrl";
    public static final String NAMESPACE = "ptxn.metastoreNamespace";
    public static final String GOVERNED = "ptxn.pulsarNamespaces";
    public static final String EXEMPT = "ptxn.exemptSubscriptionPrefix";
    public static final String CACHE = "ptxn.verdictCacheSize";

    public static PluginConfig from(Properties p) {
        String url = p.getProperty(URL, "").strip();
        if (url.isEmpty()) {
            throw new IllegalArgumentException("pulsar-txn broker plugin: set " + URL
                    + " (the metastore's redis:// or rediss:// URL, as the library's metastore.url)");
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
        return new PluginConfig(url, p.getProperty(NAMESPACE, "ptxn").strip(), namespaces,
                p.getProperty(EXEMPT, "__ptxn").strip(), cache);
    }

    /** The URL without its credentials. */
    public String shownUrl() {
        return redact(metastoreUrl);
    }

    static String redact(String url) {
        try {
            URI u = new URI(url);
            if (u.getUserInfo() == null) {
                return url;
            }
            return new URI(u.getScheme(), "***", u.getHost(), u.getPort(), u.getPath(), null, null).toString();
        } catch (Exception e) {
            return "<unparsable metastore URL>";
        }
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
