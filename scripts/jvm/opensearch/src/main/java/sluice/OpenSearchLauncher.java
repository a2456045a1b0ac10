// Runs one OpenSearch 2.19 node inside this JVM for sluice's tests and
// benchmarks (scripts/services starts it; see DESIGN.md section 8).
//
//   java -cp CLASSPATH sluice.OpenSearchLauncher DATA_DIR HTTP_PORT TRANSPORT_PORT
//
// The node binds 127.0.0.1 only, runs as a single-node cluster (no discovery,
// no bootstrap checks), keeps its data, logs and config under DATA_DIR, and
// stops cleanly on SIGTERM/SIGINT through a shutdown hook. Readiness is
// checked from outside, over HTTP (GET /_cluster/health).
package sluice;

import java.io.IOException;
import java.util.concurrent.CountDownLatch;
import org.codelibs.opensearch.runner.OpenSearchRunner;

public final class OpenSearchLauncher {
  private OpenSearchLauncher() {}

  public static void main(String[] args) throws Exception {
    if (args.length == 1 && (args[0].equals("--help") || args[0].equals("-h"))) {
      System.out.println("Usage: OpenSearchLauncher DATA_DIR HTTP_PORT TRANSPORT_PORT");
      return;
    }
    if (args.length != 3) {
      System.err.println("Usage: OpenSearchLauncher DATA_DIR HTTP_PORT TRANSPORT_PORT");
      System.exit(2);
    }
    final String dataDir = args[0];
    final String httpPort = args[1];
    final String transportPort = args[2];

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

    runner.onBuild((index, settings) -> {
      settings.put("network.host", "127.0.0.1");
      settings.put("http.port", httpPort);
      settings.put("transport.port", transportPort);
      settings.put("discovery.type", "single-node");
      // A test server: a nearly full CI disk must not turn indices read-only.
      settings.put("cluster.routing.allocation.disk.threshold_enabled", "false");
    }).build(OpenSearchRunner.newConfigs()
        .basePath(dataDir)
        .numOfNode(1)
        .clusterName("sluice-test")
        .printOnFailure());
    runner.ensureYellow();
    System.out.println("OpenSearchLauncher: node up on 127.0.0.1:" + httpPort);
    stopped.await();
  }
}
