// Runs one OpenSearch 2.19 node inside this JVM for sluice's tests and
// benchmarks (scripts/services starts it; see DESIGN.md section 8).
//
//   java [-Dsluice.https.cert=PEM -Dsluice.https.key=PEM [-Dsluice.https.client_ca=PEM]]
//        [-Dsluice.modules=CLASS,...] -cp CLASSPATH sluice.OpenSearchLauncher DATA_DIR HTTP_PORT TRANSPORT_PORT
//
// The node binds 127.0.0.1 only, runs as a single-node cluster (no discovery,
// no bootstrap checks), keeps its data, logs and config under DATA_DIR, and
// stops cleanly on SIGTERM/SIGINT through a shutdown hook. Readiness is
// checked from outside, over HTTP (GET /_cluster/health).
//
// Without properties the HTTP port speaks plain HTTP (the shared test node).
// With sluice.https.cert and sluice.https.key it speaks HTTPS only, through
// OpenSearch's own SecureNetty4HttpServerTransport (http.type netty4-secure)
// and the HttpsPlugin below, which hands it an SSLEngine per connection (the
// tests of TLS to OpenSearch, tests/support/private_opensearch.h). The files
// are read again at each new connection, so a test changes the certificate
// by replacing them, without a restart. sluice.modules replaces the default
// set of modules (a test node that needs none of them starts faster).
package sluice;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.security.GeneralSecurityException;
import java.security.KeyFactory;
import java.security.KeyStore;
import java.security.PrivateKey;
import java.security.cert.Certificate;
import java.security.cert.CertificateFactory;
import java.security.spec.PKCS8EncodedKeySpec;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Base64;
import java.util.List;
import java.util.Optional;
import java.util.concurrent.CountDownLatch;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import javax.net.ssl.KeyManagerFactory;
import javax.net.ssl.SSLContext;
import javax.net.ssl.SSLEngine;
import javax.net.ssl.SSLException;
import javax.net.ssl.TrustManagerFactory;
import org.codelibs.opensearch.runner.OpenSearchRunner;
import org.opensearch.common.settings.Settings;
import org.opensearch.http.HttpServerTransport;
import org.opensearch.plugins.Plugin;
import org.opensearch.plugins.SecureHttpTransportSettingsProvider;
import org.opensearch.plugins.SecureSettingsFactory;
import org.opensearch.plugins.SecureTransportSettingsProvider;
import org.opensearch.plugins.TransportExceptionHandler;

public final class OpenSearchLauncher {
  private OpenSearchLauncher() {}

  private static final String USAGE = "Usage: OpenSearchLauncher DATA_DIR HTTP_PORT TRANSPORT_PORT"
      + " (HTTPS: -Dsluice.https.cert=PEM -Dsluice.https.key=PEM [-Dsluice.https.client_ca=PEM])";

  public static void main(String[] args) throws Exception {
    if (args.length == 1 && (args[0].equals("--help") || args[0].equals("-h"))) {
      System.out.println(USAGE);
      return;
    }
    if (args.length != 3) {
      System.err.println(USAGE);
      System.exit(2);
    }
    final String dataDir = args[0];
    final String httpPort = args[1];
    final String transportPort = args[2];
    final boolean https = System.getProperty("sluice.https.cert") != null;
    if (https && System.getProperty("sluice.https.key") == null) {
      System.err.println("OpenSearchLauncher: sluice.https.cert needs sluice.https.key");
      System.exit(2);
    }

    final OpenSearchRunner runner = new OpenSearchRunner();
    final CountDownLatch stopped = new CountDownLatch(1);
    Runtime.getRuntime().addShutdownHook(new Thread(() -> {
      try {
        runner.close();
      } catch (IOException e) {
        System.err.println("OpenSearchLauncher: close failed: " + e);
      }
      stopped.countDown();
    }, "sluice-opensearch-stop"));

    final OpenSearchRunner.Configs configs = OpenSearchRunner.newConfigs()
        .basePath(dataDir)
        .numOfNode(1)
        .clusterName("sluice-test")
        .printOnFailure();
    if (https) configs.pluginTypes(HttpsPlugin.class.getName());
    final String modules = System.getProperty("sluice.modules");
    if (modules != null) configs.moduleTypes(modules);
    runner.onBuild((index, settings) -> {
      settings.put("network.host", "127.0.0.1");
      settings.put("http.port", httpPort);
      settings.put("transport.port", transportPort);
      settings.put("discovery.type", "single-node");
      // A test server: a nearly full CI disk must not turn indices read-only.
      settings.put("cluster.routing.allocation.disk.threshold_enabled", "false");
      if (https) settings.put("http.type", "netty4-secure");
    }).build(configs);
    runner.ensureYellow();
    System.out.println("OpenSearchLauncher: node up on " + (https ? "https" : "http") + "://127.0.0.1:" + httpPort);
    stopped.await();
  }

  // Makes OpenSearch's secure HTTP transport available (NetworkModule asks
  // every plugin for a SecureSettingsFactory); the node uses it with
  // http.type netty4-secure. The node-to-node transport stays plain.
  public static final class HttpsPlugin extends Plugin {
    private final HttpsEngines engines = new HttpsEngines(System.getProperty("sluice.https.cert"),
        System.getProperty("sluice.https.key"), System.getProperty("sluice.https.client_ca"));

    public HttpsPlugin() {}

    @Override
    public Optional<SecureSettingsFactory> getSecureSettingFactory(Settings settings) {
      return Optional.of(new SecureSettingsFactory() {
        @Override
        public Optional<SecureTransportSettingsProvider> getSecureTransportSettingsProvider(Settings s) {
          return Optional.empty();
        }

        @Override
        public Optional<SecureHttpTransportSettingsProvider> getSecureHttpTransportSettingsProvider(Settings s) {
          return Optional.of(engines);
        }
      });
    }
  }

  // One SSLEngine per HTTP connection, from the PEM files as they are when
  // the connection comes in: the certificate chain and its PKCS#8 key (one
  // file may hold both), and, while the client CA file exists, client
  // certificates signed by it are required. Netty's event loops call it.
  static final class HttpsEngines implements SecureHttpTransportSettingsProvider {
    private static final Pattern PEM =
        Pattern.compile("-----BEGIN ([A-Z ]+)-----([A-Za-z0-9+/=\\s]+)-----END \\1-----");
    private final Path cert;
    private final Path key;
    private final Path clientCa;  // null: no client certificates asked for
    private byte[][] loaded;      // the files' bytes the context was made from
    private SSLContext context;
    private boolean needClientAuth;

    HttpsEngines(String cert, String key, String clientCa) {
      this.cert = Path.of(cert);
      this.key = Path.of(key);
      this.clientCa = clientCa == null ? null : Path.of(clientCa);
    }

    @Override
    public Optional<TransportExceptionHandler> buildHttpServerExceptionHandler(Settings s, HttpServerTransport t) {
      return Optional.empty();
    }

    @Override
    public synchronized Optional<SSLEngine> buildSecureHttpServerEngine(Settings s, HttpServerTransport t)
        throws SSLException {
      try {
        final byte[] certBytes = Files.readAllBytes(cert);
        final byte[] keyBytes = Files.readAllBytes(key);
        byte[] caBytes = null;
        if (clientCa != null) {
          try {
            caBytes = Files.readAllBytes(clientCa);
          } catch (NoSuchFileException absent) {
            caBytes = null;
          }
        }
        final byte[][] now = {certBytes, keyBytes, caBytes};
        if (context == null || !Arrays.deepEquals(now, loaded)) {
          context = makeContext(certBytes, keyBytes, caBytes);
          needClientAuth = caBytes != null;
          loaded = now;
        }
      } catch (IOException | GeneralSecurityException e) {
        throw new SSLException("OpenSearchLauncher: cannot use " + cert + " / " + key + ": " + e, e);
      }
      final SSLEngine engine = context.createSSLEngine();
      engine.setUseClientMode(false);
      engine.setNeedClientAuth(needClientAuth);
      return Optional.of(engine);
    }

    private static SSLContext makeContext(byte[] certPem, byte[] keyPem, byte[] caPem)
        throws IOException, GeneralSecurityException {
      final List<Certificate> chain = certificates(certPem);
      if (chain.isEmpty()) throw new GeneralSecurityException("no CERTIFICATE block");
      final KeyStore keys = KeyStore.getInstance("PKCS12");
      keys.load(null, null);
      keys.setKeyEntry("server", privateKey(keyPem), new char[0], chain.toArray(new Certificate[0]));
      final KeyManagerFactory kmf = KeyManagerFactory.getInstance(KeyManagerFactory.getDefaultAlgorithm());
      kmf.init(keys, new char[0]);
      TrustManagerFactory tmf = null;
      if (caPem != null) {
        final KeyStore trusted = KeyStore.getInstance("PKCS12");
        trusted.load(null, null);
        int n = 0;
        for (Certificate c : certificates(caPem)) trusted.setCertificateEntry("ca" + n++, c);
        tmf = TrustManagerFactory.getInstance(TrustManagerFactory.getDefaultAlgorithm());
        tmf.init(trusted);
      }
      final SSLContext ctx = SSLContext.getInstance("TLS");
      ctx.init(kmf.getKeyManagers(), tmf == null ? null : tmf.getTrustManagers(), null);
      return ctx;
    }

    private static List<Certificate> certificates(byte[] pem) throws GeneralSecurityException {
      final CertificateFactory factory = CertificateFactory.getInstance("X.509");
      final List<Certificate> out = new ArrayList<>();
      for (byte[] der : blocks(pem, "CERTIFICATE")) {
        out.add(factory.generateCertificate(new java.io.ByteArrayInputStream(der)));
      }
      return out;
    }

    private static PrivateKey privateKey(byte[] pem) throws GeneralSecurityException {
      final List<byte[]> ders = blocks(pem, "PRIVATE KEY");
      if (ders.isEmpty()) throw new GeneralSecurityException("no PKCS#8 PRIVATE KEY block");
      final PKCS8EncodedKeySpec spec = new PKCS8EncodedKeySpec(ders.get(0));
      for (String algorithm : new String[] {"RSA", "EC", "Ed25519"}) {
        try {
          return KeyFactory.getInstance(algorithm).generatePrivate(spec);
        } catch (GeneralSecurityException notThisOne) {
          // the next algorithm
        }
      }
      throw new GeneralSecurityException("the private key is not RSA, EC or Ed25519");
    }

    private static List<byte[]> blocks(byte[] pem, String label) {
      final List<byte[]> out = new ArrayList<>();
      final Matcher m = PEM.matcher(new String(pem, java.nio.charset.StandardCharsets.US_ASCII));
      while (m.find()) {
        if (m.group(1).equals(label)) out.add(Base64.getMimeDecoder().decode(m.group(2)));
      }
      return out;
    }
  }
}
