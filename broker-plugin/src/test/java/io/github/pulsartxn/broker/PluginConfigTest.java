package io.github.pulsartxn.broker;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.Properties;
import org.junit.jupiter.api.Test;

/** What an operator writes in broker.conf, and what the plugin makes of it. */
class PluginConfigTest {

    static Properties props(String url) {
        Properties p = new Properties();
        p.setProperty(PluginConfig.URL, url);
        p.setProperty(PluginConfig.GOVERNED, "public/default, acme/orders");
        return p;
    }

    @Test
    void noPasswordEverAppearsInTheShownUrl() {
        for (String url : new String[] {"redis://u:S3CR3T@h:6379/0", "redis://:S3CR3T@h:6379",
                "redis://h:6379?password=S3CR3T",
                "redis://S3CR3T@h:1"}) {
            String shown = PluginConfig.redact(url);
            assertFalse(shown.contains("S3"), shown);
            assertTrue(shown.contains("h:"), shown);
        }
        // an '@' the URI does not read as the userinfo's end: which part is the password
        // cannot be told, so none of it shows (not even a port that may be its digits)
        for (String url : new String[] {"redis://h:6379/0?password=S3@cd", "redis://h:6379?x=S3@h:1",
                "redis://default:S3/xyz@h:6379", "redis://default:2024/S3@h:6379", "redis://d:99?S3@h:1",
                "redis://d:99#S3@h:1", "redis://d:2024/S3@h", "rediss://u:S3/CR#3T?@h:6380"}) {
            String shown = PluginConfig.redact(url);
            assertFalse(shown.contains("S3") || shown.contains("99") || shown.contains("2024"), shown);
        }
        assertEquals("<not a URL>", PluginConfig.redact("S3CR3T"));
    }

    @Test
    void aBadUrlIsRefusedWithoutItsPassword() {
        var e = assertThrows(IllegalArgumentException.class,
                () -> new RedisMetastore("redis://u:S3 CR3T@h:6379"));
        assertFalse(e.getMessage().contains("S3"), e.getMessage());
    }

    @Test
    void aUrlTheLibraryReadsDifferentlyIsRefusedNamedAndWithoutItsPassword() {
        // review of issue 28, finding 10: each was read wrong or echoed the password
        for (String url : new String[] {"redis://:S3CR3T@h:6379/%7B", "redis://:S3CR3T@redis_1:6379",
                "redis://default:2024/S3CR3T@h:6379",
                "redis://h:6379?password=S3CR3T"}) {
            var e = assertThrows(IllegalArgumentException.class, () -> new RedisMetastore(url));
            assertFalse(e.getMessage().contains("S3"), e.getMessage());
            assertTrue(e.getMessage().contains(PluginConfig.URL), e.getMessage());
        }
    }

    @Test
    void aClusterUrlShowsItsSeedsAndNeverItsPassword() {
        assertEquals("redis+cluster://***@h1:7000,h2:7001/0?…",
                PluginConfig.redact("redis+cluster://u:S3CR3T@h1:7000,h2:7001/0?namespace=n"));
        assertEquals("rediss+cluster://h1:7000,h2:7001", PluginConfig.redact("rediss+cluster://h1:7000,h2:7001"));
        for (String url : new String[] {"redis+cluster://u:S3/CR3T@h1:7000", "redis+cluster://u:S3?x@h1:7000",
                "redis+cluster://h1:7000/0?password=S3CR3T@x"}) {
            String shown = PluginConfig.redact(url);
            assertFalse(shown.contains("S3"), shown);
        }
    }

    @Test
    void aClusterUrlTheLibraryWouldRefuseIsRefusedNamedAndWithoutItsPassword() {
        for (String url : new String[] {"redis+cluster://u:S3CR3T@h1:7000/1", "redis+cluster://u:S3CR3T@h1",
                "redis+cluster://u:S3CR3T@h1:7000,h2", "redis+cluster://h1:7000?password=S3CR3T",
                "redis+cluster://u:S3/CR3T@h1:7000"}) {
            var e = assertThrows(IllegalArgumentException.class, () -> new RedisMetastore(url));
            assertFalse(e.getMessage().contains("S3"), e.getMessage());
            assertTrue(e.getMessage().contains(PluginConfig.URL), e.getMessage());
        }
    }

    @Test
    void aPasswordFileAndAPasswordInTheUrlAreRefusedTogetherWithoutEither() throws Exception {
        java.nio.file.Path f = java.nio.file.Files.createTempFile("ptxn", "pw");
        java.nio.file.Files.writeString(f, "FILE-S3CR3T\n");
        var e = assertThrows(IllegalArgumentException.class,
                () -> new RedisMetastore("redis://u:S3CR3T@h:6379/0", f));
        assertFalse(e.getMessage().contains("S3"), e.getMessage());
        assertTrue(e.getMessage().contains(PluginConfig.PASSWORD_FILE), e.getMessage());
        var missing = assertThrows(IllegalArgumentException.class,
                () -> new RedisMetastore("redis://u@h:6379/0", f.resolveSibling("no-such-ptxn-file")));
        assertTrue(missing.getMessage().contains(PluginConfig.PASSWORD_FILE), missing.getMessage());
        Properties p = props("redis://u@h:6379/0");
        p.setProperty(PluginConfig.PASSWORD_FILE, f.toString());
        assertEquals(f, PluginConfig.from(p).passwordFile());
        assertFalse(PluginConfig.from(props("redis://u:S3CR3T@h:6379/0")).toString().contains("S3"));
    }

    @Test
    void tlsOptionsThePluginCannotHonourAreRefusedByName() {
        for (String opt : new String[] {"ssl_certfile=/c.pem", "ssl_keyfile=/k.pem", "ssl_cert_reqs=none",
                "ssl_ca_certs=/no/such/ca.pem"}) {
            String url = "rediss://u:S3CR3T@h:6380/0?" + opt;
            var e = assertThrows(IllegalArgumentException.class, () -> new RedisMetastore(url));
            assertTrue(e.getMessage().contains(opt.substring(0, opt.indexOf('='))), e.getMessage());
            assertFalse(e.getMessage().contains("S3"), e.getMessage());
        }
    }

    @Test
    void aBadlyEncodedPasswordIsRefusedWithoutAnyOfIt() {
        // URLDecoder's message quotes the characters it cannot read
        for (String url : new String[] {"redis+cluster://u:p%zzS3@h1:7000", "redis://u:p%zzS3@h:6379/0",
                "redis://h:6379/0?namespace=%zzS3"}) {
            var e = assertThrows(IllegalArgumentException.class,
                    () -> new RedisMetastore(url, null).close());
            assertFalse(e.getMessage().contains("zz") || e.getMessage().contains("S3"), e.getMessage());
        }
        var e = assertThrows(IllegalArgumentException.class,
                () -> PluginConfig.from(props("redis://h:6379/0?namespace=%zzS3")));
        assertFalse(e.getMessage().contains("zz"), e.getMessage());
    }

    @Test
    void noClusterNodeIsContactedBeforeFirstUse() {
        // a cluster down when the broker starts must not fail the plugin (every topic's load)
        new RedisMetastore("redis+cluster://127.0.0.1:1,127.0.0.1:2/0", null).close();
    }

    @Test
    void theLibrarysUrlOptionsAreHonoured() {
        PluginConfig c = PluginConfig.from(props("redis://h:6379?namespace=orders&durability=waitaof"));
        assertEquals("orders", c.metastoreNamespace());
        assertTrue(c.waitaof());
        Properties p = props("redis://h:6379?namespace=orders");
        p.setProperty(PluginConfig.NAMESPACE, "other");
        var e = assertThrows(IllegalArgumentException.class, () -> PluginConfig.from(p));
        assertTrue(e.getMessage().contains(PluginConfig.NAMESPACE), e.getMessage());
        assertThrows(IllegalArgumentException.class,
                () -> PluginConfig.from(props("redis://h:6379?durability=eventually")));
    }

    @Test
    void onlyTopicsOfTheGovernedNamespacesAreGoverned() {
        PluginConfig c = PluginConfig.from(props("redis://h:6379"));
        assertTrue(c.governs("persistent://public/default/t"));
        assertTrue(c.governs("persistent://acme/orders/t-partition-0"));
        assertFalse(c.governs("persistent://public/other/t"));
        assertFalse(c.governs("non-persistent://public/default/t"));
    }

    @Test
    void missingSettingsAreNamed() {
        var e = assertThrows(IllegalArgumentException.class, () -> PluginConfig.from(new Properties()));
        assertTrue(e.getMessage().contains(PluginConfig.URL), e.getMessage());
        Properties p = new Properties();
        p.setProperty(PluginConfig.URL, "redis://h:1");
        e = assertThrows(IllegalArgumentException.class, () -> PluginConfig.from(p));
        assertTrue(e.getMessage().contains(PluginConfig.GOVERNED), e.getMessage());
    }

    @Test
    void theSameConfigReadTwiceIsTheSameNamespace() {
        // a difference drops every cached verdict: read every 500 ms, it must not differ
        // from itself (it did, by identity, and each tick emptied the caches)
        Namespace a = new Namespace("ns", 4, new KeyLayout("ns", 4, "spread1"), "d1");
        assertEquals(a, new Namespace("ns", 4, new KeyLayout("ns", 4, "spread1"), "d1"));
        assertFalse(a.equals(new Namespace("ns", 4, new KeyLayout("ns", 4, "plain"), "d1")));
        assertFalse(a.equals(new Namespace("ns", 4, new KeyLayout("ns", 4, "spread1"), "d2")));
    }
}
