// A small Go service instrumented the way Grafana documents Go span profiles: the Pyroscope Go SDK
// (github.com/grafana/pyroscope-go) uploading pprof to /ingest, the OpenTelemetry Go SDK exporting spans over
// OTLP/HTTP or OTLP/gRPC, and github.com/grafana/otel-profiling-go wrapping the tracer provider so every CPU sample
// taken while a request runs carries the pprof labels span_id and span_name of the request's local root span (its
// otelpyroscope.go: spanIDScope defaults to ScopeRootSpan) and the root span gets pyroscope.profile.id.
//
// It serves two handlers on 127.0.0.1 and drives them itself:
//
//	GET /cpu  root span "GET /cpu" -> child "checksum" burning CPU in cpuHotFunction
//	GET /io   root span "GET /io"  -> child "query-db" sleeping (I/O bound: no CPU of its own)
//
// then stops the tracer (flushing every span) and the profiler (uploading the last window), and prints one JSON line
// per span the test resolves: {"role", "trace_id", "span_id", "name"}.
//
// usage: service -url http://127.0.0.1:PORT [-otlp http|grpc] [-grpc 127.0.0.1:PORT] [-service NAME]
//
//	service -now   (its wall clock in Unix ns: Go reads the clock without libc, so libfaketime never moves it)
package main

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/url"
	"os"
	"sync"
	"time"

	otelpyroscope "github.com/grafana/otel-profiling-go"
	"github.com/grafana/pyroscope-go"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

var (
	mu    sync.Mutex
	spans = map[string]trace.SpanContext{}
	names = map[string]string{}
	sink  [32]byte
)

// stderrLogger prints the SDK's errors (a refused upload among them) for the test to read; pyroscope-go's default
// logger says nothing.
type stderrLogger struct{}

func (stderrLogger) Infof(string, ...interface{})  {}
func (stderrLogger) Debugf(string, ...interface{}) {}
func (stderrLogger) Errorf(format string, args ...interface{}) {
	fmt.Fprintf(os.Stderr, "pyroscope error: "+format+"\n", args...)
}

func keep(role, name string, sc trace.SpanContext) {
	mu.Lock()
	defer mu.Unlock()
	spans[role] = sc
	names[role] = name
}

// cpuHotFunction hashes until it has burned d of this goroutine's time: the function the flame graph must show.
//
//go:noinline
func cpuHotFunction(d time.Duration) {
	buf := make([]byte, 4096)
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		for i := 0; i < 64; i++ {
			sink = sha256.Sum256(buf)
			buf[0] = sink[0]
		}
	}
}

func handleCPU(tracer trace.Tracer, burn time.Duration) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		ctx, root := tracer.Start(r.Context(), "GET /cpu", trace.WithSpanKind(trace.SpanKindServer),
			trace.WithAttributes(attribute.String("http.route", "/cpu")))
		_, child := tracer.Start(ctx, "checksum")
		cpuHotFunction(burn)
		child.End()
		root.End()
		keep("cpu-root", "GET /cpu", root.SpanContext())
		keep("cpu-child", "checksum", child.SpanContext())
		fmt.Fprintln(w, "ok")
	}
}

func handleIO(tracer trace.Tracer, wait time.Duration) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		ctx, root := tracer.Start(r.Context(), "GET /io", trace.WithSpanKind(trace.SpanKindServer),
			trace.WithAttributes(attribute.String("http.route", "/io")))
		_, child := tracer.Start(ctx, "query-db", trace.WithSpanKind(trace.SpanKindClient))
		time.Sleep(wait)
		child.End()
		root.End()
		keep("io-root", "GET /io", root.SpanContext())
		keep("io-child", "query-db", child.SpanContext())
		fmt.Fprintln(w, "ok")
	}
}

func exporter(ctx context.Context, kind, base, grpcAddr string) (sdktrace.SpanExporter, error) {
	switch kind {
	case "http":
		u, err := url.Parse(base)
		if err != nil {
			return nil, err
		}
		return otlptracehttp.New(ctx, otlptracehttp.WithEndpoint(u.Host), otlptracehttp.WithInsecure(),
			otlptracehttp.WithTimeout(10*time.Second))
	case "grpc":
		return otlptracegrpc.New(ctx, otlptracegrpc.WithEndpoint(grpcAddr), otlptracegrpc.WithInsecure(),
			otlptracegrpc.WithTimeout(10*time.Second))
	}
	return nil, fmt.Errorf("-otlp must be http or grpc, not %q", kind)
}

func get(client *http.Client, base, path string) {
	resp, err := client.Get(base + path)
	if err != nil {
		log.Fatalf("GET %s: %v", path, err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
}

func main() {
	bridge := flag.String("url", "", "the bridge (Pyroscope server address; OTLP/HTTP endpoint)")
	kind := flag.String("otlp", "http", "trace exporter: http or grpc")
	grpcAddr := flag.String("grpc", "", "OTLP/gRPC host:port (with -otlp grpc)")
	service := flag.String("service", "shop-go", "service.name and Pyroscope application name")
	rounds := flag.Int("rounds", 3, "requests of each kind")
	burn := flag.Duration("burn", 600*time.Millisecond, "CPU each /cpu request burns")
	now := flag.Bool("now", false, "print this process's wall clock (Unix ns) and exit")
	flag.Parse()
	if *now { // the clock the SDKs stamp with: a test under libfaketime gives the bridge this one
		fmt.Println(time.Now().UnixNano())
		return
	}
	if *bridge == "" {
		log.Fatal("-url is required")
	}
	ctx := context.Background()

	profiler, err := pyroscope.Start(pyroscope.Config{
		ApplicationName: *service,
		ServerAddress:   *bridge,
		UploadRate:      2 * time.Second,
		Tags:            map[string]string{"region": "test"},
		Logger:          stderrLogger{},
	})
	if err != nil {
		log.Fatalf("pyroscope: %v", err)
	}
	exp, err := exporter(ctx, *kind, *bridge, *grpcAddr)
	if err != nil {
		log.Fatalf("exporter: %v", err)
	}
	res := resource.NewSchemaless(attribute.String("service.name", *service))
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	otel.SetTracerProvider(otelpyroscope.NewTracerProvider(tp))
	tracer := otel.Tracer("shop-go")

	mux := http.NewServeMux()
	mux.Handle("/cpu", handleCPU(tracer, *burn))
	mux.Handle("/io", handleIO(tracer, 400*time.Millisecond))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	base := "http://" + ln.Addr().String()
	client := &http.Client{Timeout: 30 * time.Second}
	for i := 0; i < *rounds; i++ {
		get(client, base, "/cpu")
		get(client, base, "/io")
	}
	_ = srv.Shutdown(ctx)

	if err := tp.Shutdown(ctx); err != nil { // exports every span before the profiles' last window
		log.Fatalf("tracer shutdown: %v", err)
	}
	if err := profiler.Stop(); err != nil { // uploads the last window
		log.Fatalf("profiler stop: %v", err)
	}
	out := json.NewEncoder(os.Stdout)
	for _, role := range []string{"cpu-root", "cpu-child", "io-root", "io-child"} {
		sc := spans[role]
		_ = out.Encode(map[string]string{
			"role": role, "name": names[role], "trace_id": sc.TraceID().String(), "span_id": sc.SpanID().String(),
		})
	}
}
