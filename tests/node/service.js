// A small Node.js service instrumented with the stock SDKs, driven by tests/test_node_sdk.py:
// @pyroscope/nodejs (wall profiler with CPU time, uploads to <url>/ingest) and OpenTelemetry JS
// (sdk-trace-node, OTLP/HTTP exporter, protobuf or JSON, to <url>/v1/traces).
//
//   node service.js <base-url> <proto|json> <service-name>
//
// What it does, in order (one line of JSON per span on stdout, read by the test):
//   capture window 1: span "cpu-heavy" runs nodeHotFunction (~0.8 s of CPU), then span "io-wait" awaits a timer
//                     (1.2 s): the window ends well after cpu-heavy, so an end-stamped profile lies after that span;
//   window boundary:  the wall profiler is stopped (its profile is uploaded) and started again;
//   capture window 2: a pause, then span "io-only" awaits a timer (0.8 s) and burns no CPU;
//   shutdown:         the profiler is stopped (last profile uploaded), the tracer provider flushes its spans.
// Nothing waits for an SDK timer: uploads happen on the explicit stops, so the program behaves the same with the
// clock shifted (faketime).
'use strict';

const Pyroscope = require('@pyroscope/nodejs').default; // the documented API object (init, start…, stop…)
const { trace, SpanKind } = require('@opentelemetry/api');
const { NodeTracerProvider } = require('@opentelemetry/sdk-trace-node');
const { BatchSpanProcessor } = require('@opentelemetry/sdk-trace-base');
const { resourceFromAttributes } = require('@opentelemetry/resources');

const [baseUrl, encoding, serviceName] = process.argv.slice(2);
if (!baseUrl || !['proto', 'json'].includes(encoding) || !serviceName) {
  process.stderr.write('usage: node service.js <base-url> <proto|json> <service-name>\n');
  process.exit(2);
}
const { OTLPTraceExporter } = encoding === 'proto'
  ? require('@opentelemetry/exporter-trace-otlp-proto')
  : require('@opentelemetry/exporter-trace-otlp-http');

const CPU_MS = Number(process.env.NODE_SDK_TEST_CPU_MS || 800);

function nodeHotFunction(ms) {
  // burns CPU for `ms` milliseconds of wall time in a named, non-inlined loop
  const until = Date.now() + ms;
  let acc = 0;
  while (Date.now() < until) {
    for (let i = 0; i < 20000; i++) {
      acc = (acc + Math.sqrt(i * 7.3) * Math.sin(i)) % 1e9;
    }
  }
  return acc;
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

function report(span, role) {
  const c = span.spanContext();
  process.stdout.write(JSON.stringify({ role, trace_id: c.traceId, span_id: c.spanId }) + '\n');
}

async function main() {
  Pyroscope.init({
    appName: serviceName,
    serverAddress: baseUrl,
    flushIntervalMs: 3600 * 1000, // uploads happen on the explicit stops below, never on this timer
    tags: { env: 'node-e2e' },
    wall: { samplingDurationMs: 1000, samplingIntervalMicros: 10000, collectCpuTime: true },
  });
  Pyroscope.startWallProfiling();

  const provider = new NodeTracerProvider({
    resource: resourceFromAttributes({ 'service.name': serviceName, 'service.namespace': 'node-e2e' }),
    spanProcessors: [new BatchSpanProcessor(new OTLPTraceExporter({ url: baseUrl + '/v1/traces', timeoutMillis: 10000 }))],
  });
  provider.register();
  const tracer = trace.getTracer('node-e2e');

  await tracer.startActiveSpan('cpu-heavy', { kind: SpanKind.SERVER }, async (span) => {
    nodeHotFunction(CPU_MS);
    report(span, 'cpu-heavy');
    span.end();
  });
  await tracer.startActiveSpan('io-wait', { kind: SpanKind.SERVER }, async (span) => {
    await sleep(1200);
    report(span, 'io-wait');
    span.end();
  });

  await Pyroscope.stopWallProfiling(); // window 1 uploaded
  Pyroscope.startWallProfiling();
  await sleep(700);
  await tracer.startActiveSpan('io-only', { kind: SpanKind.SERVER }, async (span) => {
    await sleep(800);
    report(span, 'io-only');
    span.end();
  });
  await sleep(300);

  await Pyroscope.stopWallProfiling(); // window 2 uploaded
  await provider.shutdown();
}

main().then(
  () => process.exit(0),
  (err) => {
    process.stderr.write(String((err && err.stack) || err) + '\n');
    process.exit(1);
  },
);
