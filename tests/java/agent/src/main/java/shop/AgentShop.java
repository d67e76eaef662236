// A small Java service instrumented the way Pyroscope documents Java span profiles, for tests/sdk/test_java_agent.py.
//
// Nothing of Pyroscope's is called here. The OpenTelemetry Java SDK is set up by its autoconfigure module from the
// OTEL_* environment (OTLP over HTTP, protobuf). When io.pyroscope:otel is on the class path, its
// PyroscopeOtelAutoConfigurationCustomizerProvider (a service the autoconfigure module loads) starts the Pyroscope
// agent it ships, configured from the PYROSCOPE_* environment, and adds PyroscopeOtelSpanProcessor: every local
// root span gets pyroscope.profile.id and, while it runs, the labels profile_id (its span id) and span_name on every
// sample async-profiler takes of its thread (grafana/otel-profiling-java v0.10.1.11,
// PyroscopeOtelAutoConfigurationCustomizerProvider.java and PyroscopeOtelSpanProcessor.java). Without it the test
// runs the Pyroscope agent as -javaagent and the spans are only traced.
//
// It serves two handlers on 127.0.0.1 and drives them itself:
//
//   GET /cpu  root span "GET /cpu" -> child "checksum" burning CPU in hotPrimes
//   GET /io   root span "GET /io"  -> child "query-db" sleeping (I/O bound: no CPU of its own)
//
// then flushes the tracer and prints one JSON line per span the test resolves
// ({"role", "trace_id", "span_id", "name"}) and {"done_ms": <epoch ms>}. It keeps running, so that the agent goes on
// uploading, until its standard input closes (or 120 s pass).
//
// usage: java -cp ... shop.AgentShop <rounds> <burn ms>
package shop;

import com.sun.net.httpserver.HttpExchange;
import com.sun.net.httpserver.HttpServer;
import io.opentelemetry.api.trace.Span;
import io.opentelemetry.api.trace.SpanKind;
import io.opentelemetry.api.trace.Tracer;
import io.opentelemetry.context.Scope;
import io.opentelemetry.sdk.OpenTelemetrySdk;
import io.opentelemetry.sdk.autoconfigure.AutoConfiguredOpenTelemetrySdk;
import java.io.IOException;
import java.io.OutputStream;
import java.net.InetSocketAddress;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.concurrent.TimeUnit;

public final class AgentShop {
    private static final Map<String, String[]> SPANS = new LinkedHashMap<>();
    private static volatile long sink;

    private AgentShop() {}

    /** The method the flame graph must show: counts primes until it has burned {@code millis} of this thread. */
    static long hotPrimes(long millis) {
        long deadline = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(millis);
        long count = 0;
        int n = 2;
        while (System.nanoTime() < deadline) {
            for (int block = 0; block < 2000; block++, n++) {
                boolean prime = n > 1;
                for (int d = 2; (long) d * d <= n; d++) {
                    if (n % d == 0) {
                        prime = false;
                        break;
                    }
                }
                if (prime) {
                    count++;
                }
            }
            if (n > 5_000_000) {
                n = 2;
            }
        }
        sink += count;
        return count;
    }

    private static synchronized void keep(String role, String name, Span span) {
        SPANS.put(role, new String[] {name, span.getSpanContext().getTraceId(), span.getSpanContext().getSpanId()});
    }

    private static void answer(HttpExchange exchange) throws IOException {
        byte[] body = "ok\n".getBytes(StandardCharsets.UTF_8);
        exchange.sendResponseHeaders(200, body.length);
        try (OutputStream out = exchange.getResponseBody()) {
            out.write(body);
        }
    }

    private static void handleCpu(Tracer tracer, long burn, HttpExchange exchange) throws IOException {
        Span root = tracer.spanBuilder("GET /cpu").setSpanKind(SpanKind.SERVER)
            .setAttribute("http.route", "/cpu").startSpan();
        try (Scope ignored = root.makeCurrent()) {
            Span child = tracer.spanBuilder("checksum").startSpan();
            try (Scope alsoIgnored = child.makeCurrent()) {
                hotPrimes(burn);
            } finally {
                child.end();
            }
            keep("cpu-child", "checksum", child);
            answer(exchange);
        } finally {
            root.end();
        }
        keep("cpu-root", "GET /cpu", root);
    }

    private static void handleIo(Tracer tracer, long wait, HttpExchange exchange) throws IOException {
        Span root = tracer.spanBuilder("GET /io").setSpanKind(SpanKind.SERVER)
            .setAttribute("http.route", "/io").startSpan();
        try (Scope ignored = root.makeCurrent()) {
            Span child = tracer.spanBuilder("query-db").setSpanKind(SpanKind.CLIENT).startSpan();
            try (Scope alsoIgnored = child.makeCurrent()) {
                Thread.sleep(wait);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            } finally {
                child.end();
            }
            keep("io-child", "query-db", child);
            answer(exchange);
        } finally {
            root.end();
        }
        keep("io-root", "GET /io", root);
    }

    private static void get(HttpClient client, String base, String path) throws IOException, InterruptedException {
        HttpRequest request = HttpRequest.newBuilder(URI.create(base + path)).timeout(Duration.ofSeconds(30)).build();
        HttpResponse<String> response = client.send(request, HttpResponse.BodyHandlers.ofString());
        if (response.statusCode() != 200) {
            throw new IOException("GET " + path + " answered " + response.statusCode());
        }
    }

    private static String json(String... pairs) {
        StringBuilder sb = new StringBuilder("{");
        for (int i = 0; i < pairs.length; i += 2) {
            sb.append(i == 0 ? "" : ", ").append('"').append(pairs[i]).append("\": \"").append(pairs[i + 1])
                .append('"');
        }
        return sb.append('}').toString();
    }

    public static void main(String[] args) throws Exception {
        int rounds = Integer.parseInt(args[0]);
        long burn = Long.parseLong(args[1]);
        OpenTelemetrySdk sdk = AutoConfiguredOpenTelemetrySdk.initialize().getOpenTelemetrySdk();
        Tracer tracer = sdk.getTracer("agent-shop");

        HttpServer server = HttpServer.create(new InetSocketAddress("127.0.0.1", 0), 0);
        server.createContext("/cpu", exchange -> handleCpu(tracer, burn, exchange));
        server.createContext("/io", exchange -> handleIo(tracer, 400, exchange));
        server.start();
        String base = "http://127.0.0.1:" + server.getAddress().getPort();
        HttpClient client = HttpClient.newBuilder().version(HttpClient.Version.HTTP_1_1).build();
        for (int i = 0; i < rounds; i++) {
            get(client, base, "/cpu");
            get(client, base, "/io");
        }
        server.stop(0);
        if (!sdk.getSdkTracerProvider().forceFlush().join(30, TimeUnit.SECONDS).isSuccess()) {
            throw new IllegalStateException("the spans could not be exported");
        }
        synchronized (AgentShop.class) {
            for (Map.Entry<String, String[]> it : SPANS.entrySet()) {
                String[] v = it.getValue();
                System.out.println(json("role", it.getKey(), "name", v[0], "trace_id", v[1], "span_id", v[2]));
            }
        }
        System.out.println("{\"done_ms\": " + System.currentTimeMillis() + "}");
        System.out.flush();
        // the agent uploads on its own schedule: the test closes our standard input once it has what it needs
        Thread stdin = new Thread(() -> {
            try {
                while (System.in.read() >= 0) {
                    // nothing is sent; end of input is the signal
                }
            } catch (IOException ignored) {
                // closed
            }
        });
        stdin.setDaemon(true);
        stdin.start();
        stdin.join(TimeUnit.SECONDS.toMillis(120));
        sdk.close();
    }
}
