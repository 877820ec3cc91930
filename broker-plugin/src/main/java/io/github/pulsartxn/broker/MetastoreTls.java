package io.github.pulsartxn.broker;

import java.io.IOException;
import java.io.InputStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.GeneralSecurityException;
import java.security.KeyStore;
import java.security.cert.Certificate;
import java.security.cert.CertificateFactory;
import java.util.List;
import java.util.Map;
import javax.net.ssl.SSLContext;
import javax.net.ssl.SSLParameters;
import javax.net.ssl.SSLSocketFactory;
import javax.net.ssl.TrustManagerFactory;

/**
 * TLS to the metastore as the library's URL asks for it: the same {@code rediss://} URL
 * works in both. {@code ?ssl_ca_certs=} (a PEM file of CA certificates) is the trust the
 * server's certificate is checked against, with its host name; without it, the broker
 * JVM's trust store. Client certificates are not read here: refused by name rather than
 * ignored (a server that requires one would fail every handshake, unexplained).
 */
final class MetastoreTls {
    private MetastoreTls() {
    }

    /** The socket factory for a TLS URL, or null for the JVM's default trust. */
    static SSLSocketFactory factory(String url, String shown) {
        Map<String, String> q = PluginConfig.query(url);
        for (String k : List.of("ssl_certfile", "ssl_keyfile")) {
            if (q.containsKey(k)) {
                throw new IllegalArgumentException(shown + ": " + k + " (a client certificate) is not read"
                        + " by the broker plugin; give it an ACL user and password instead");
            }
        }
        String reqs = q.getOrDefault("ssl_cert_reqs", "required");
        if (!reqs.equals("required")) {
            throw new IllegalArgumentException(shown + ": ssl_cert_reqs=" + reqs + ": the broker plugin always"
                    + " checks the server's certificate (give its CA as ssl_ca_certs)");
        }
        String ca = q.get("ssl_ca_certs");
        if (ca == null) {
            return null;
        }
        try (InputStream in = Files.newInputStream(Path.of(ca))) {
            KeyStore trust = KeyStore.getInstance(KeyStore.getDefaultType());
            trust.load(null, null);
            int n = 0;
            for (Certificate c : CertificateFactory.getInstance("X.509").generateCertificates(in)) {
                trust.setCertificateEntry("ca" + n++, c);
            }
            if (n == 0) {
                throw new IllegalArgumentException(shown + ": ssl_ca_certs " + ca + " holds no certificate");
            }
            TrustManagerFactory tmf = TrustManagerFactory.getInstance(TrustManagerFactory.getDefaultAlgorithm());
            tmf.init(trust);
            SSLContext ctx = SSLContext.getInstance("TLS");
            ctx.init(null, tmf.getTrustManagers(), null);
            return ctx.getSocketFactory();
        } catch (IOException | GeneralSecurityException e) {
            throw new IllegalArgumentException(shown + ": ssl_ca_certs " + ca + " cannot be read: " + e);
        }
    }

    /** The server's certificate must name the host the URL names. */
    static SSLParameters checkingHostName() {
        SSLParameters p = new SSLParameters();
        p.setEndpointIdentificationAlgorithm("HTTPS");
        return p;
    }
}
