// A small Java service for the JFR ingest test (tests/sdk/test_jfr_jvm.py): "requests" on several threads, each an
// OpenTelemetry root span sent to the bridge as OTLP/HTTP JSON with the JDK's own java.net.http.HttpClient.
// GET /work burns CPU in hotPrimes (three threads), GET /alloc allocates in allocHeavy (one thread). The JVM records
// JFR (-XX:StartFlightRecording, execution and allocation sampling); the test uploads the recording as the
// Pyroscope Java SDK does. Prints one JSON line per span, then {"from": s, "until": s} (the capture window, epoch
// seconds, as the SDK's Snapshot has it).
// Usage: java -XX:StartFlightRecording=... JfrShop <bridge base URL> <seconds>
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.ThreadLocalRandom;

public class JfrShop {
    static final ConcurrentLinkedQueue<String> SPANS = new ConcurrentLinkedQueue<>();
    static volatile long sink;

    static long hotPrimes(int limit) {
        long count = 0;
        for (int i = 2; i < limit; i++) {
            boolean prime = true;
            for (int j = 2; (long) j * j <= i; j++) {
                if (i % j == 0) {
                    prime = false;
                    break;
                }
            }
            if (prime) count++;
        }
        return count;
    }

    static long allocHeavy(int n) {
        long total = 0;
        List<byte[]> keep = new ArrayList<>();
        for (int i = 0; i < n; i++) {
            byte[] chunk = new byte[512 + (i % 32) * 256];
            chunk[i % chunk.length] = (byte) i;
            total += chunk.length;
            if (i % 8 == 0) keep.add(chunk);
            if (keep.size() > 64) keep.clear();
        }
        if (n % 1000 == 0) keep.add(new byte[2 * 1024 * 1024]); // a large array: outside any TLAB
        return total + keep.size();
    }

    static String hex(int bytes) {
        StringBuilder sb = new StringBuilder();
        ThreadLocalRandom r = ThreadLocalRandom.current();
        for (int i = 0; i < bytes; i++) sb.append(String.format("%02x", r.nextInt(256)));
        return sb.toString();
    }

    static void request(String name, Runnable work) {
        String trace = hex(16), span = hex(8);
        long start = System.currentTimeMillis() * 1_000_000L;
        work.run();
        long end = System.currentTimeMillis() * 1_000_000L;
        String json = String.format(
            "{\"traceId\":\"%s\",\"spanId\":\"%s\",\"name\":\"%s\",\"kind\":2,"
                + "\"startTimeUnixNano\":\"%d\",\"endTimeUnixNano\":\"%d\"}", trace, span, name, start, end);
        SPANS.add(json);
        synchronized (System.out) {
            System.out.println(json);
        }
    }

    static void send(HttpClient client, String url) throws Exception {
        List<String> batch = new ArrayList<>();
        for (String s; (s = SPANS.poll()) != null; ) batch.add(s);
        if (batch.isEmpty()) return;
        String body = "{\"resourceSpans\":[{\"resource\":{\"attributes\":[{\"key\":\"service.name\","
            + "\"value\":{\"stringValue\":\"java-shop\"}}]},\"scopeSpans\":[{\"scope\":{\"name\":\"jfr-shop\"},"
            + "\"spans\":[" + String.join(",", batch) + "]}]}]}";
        HttpRequest req = HttpRequest.newBuilder(URI.create(url + "/v1/traces"))
            .timeout(Duration.ofSeconds(10))
            .header("Content-Type", "application/json")
            .POST(HttpRequest.BodyPublishers.ofString(body))
            .build();
        HttpResponse<String> resp = client.send(req, HttpResponse.BodyHandlers.ofString());
        if (resp.statusCode() != 200) throw new IllegalStateException("OTLP export: " + resp.statusCode() + " " + resp.body());
    }

    public static void main(String[] args) throws Exception {
        String url = args[0];
        long seconds = (long) (Double.parseDouble(args[1]) * 1000);
        long from = System.currentTimeMillis() / 1000;
        long deadline = System.currentTimeMillis() + seconds;
        List<Thread> threads = new ArrayList<>();
        for (int t = 0; t < 3; t++) {
            threads.add(new Thread(() -> {
                while (System.currentTimeMillis() < deadline) request("GET /work", () -> sink += hotPrimes(60_000));
            }, "worker-" + t));
        }
        threads.add(new Thread(() -> {
            while (System.currentTimeMillis() < deadline) {
                request("GET /alloc", () -> sink += allocHeavy(5_000));
                try {
                    Thread.sleep(20); // an allocation-heavy endpoint, not a CPU-bound one
                } catch (InterruptedException e) {
                    return;
                }
            }
        }, "allocator"));
        threads.forEach(Thread::start);
        HttpClient client = HttpClient.newBuilder().connectTimeout(Duration.ofSeconds(5)).build();
        while (threads.stream().anyMatch(Thread::isAlive)) {
            Thread.sleep(500);
            send(client, url);
        }
        send(client, url);
        long until = System.currentTimeMillis() / 1000 + 1;
        System.out.println("{\"from\":" + from + ",\"until\":" + until + "}");
    }
}
