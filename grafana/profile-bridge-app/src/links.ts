/**
 * The links this plugin adds to Grafana's trace view, as pure functions.
 *
 * Grafana accepts a plugin link's path only inside the plugin (`/a/<plugin id>/…`), and a link's `configure()` runs
 * without the app's settings. So each link points at one of the app's own pages, carrying what the trace view knows
 * (ids, start, the trace's data source, the resource attributes) in its query string; that page reads the settings
 * and goes on to the final URL, built here too:
 *
 * - `/a/<id>/span?trace=…&span=…[&scope=request]` → the bridge's span page `<bridgeUrl>/spans/<trace>/<span>`;
 * - `/a/<id>/span?trace=…&span=…&view=compare` → the span against its usual self `<bridgeUrl>/spans/<trace>/<span>/compare`;
 * - `/a/<id>/functions?service=…&start=…&…` → the service's hot functions, each opening the requests that burn it
 *   (`<bridgeUrl>/functions/spans?service=…&from=…&to=…`);
 * - `/a/<id>/explore?trace=…&span=…&start=…&…` → Grafana Explore, split: the trace beside the span's profile query.
 *
 * Ids are checked (hex, the right length) before anything is built: a context without a span id (Grafana before
 * 12.4) or with a malformed one gives no link. Every value goes into a URL through `URLSearchParams` or
 * `encodeURIComponent`, and into a label selector escaped, so an attribute value can never add a path segment, a
 * query parameter or a label matcher.
 */
import {
  AppSettings,
  DEFAULT_PROFILE_TYPE,
  DEFAULT_PROFILES_UID,
  DEFAULT_TAGS,
  DEFAULT_TRACES_UID,
  PLUGIN_BASE_URL,
  ResourceAttributesContext,
  Tag,
  TraceHeaderContext,
} from './types';

/** Grafana's own "Profiles for this span" window: a minute each side of the span. */
export const QUERY_MARGIN_MS = 60_000;
export const TEMPO_TYPE = 'tempo';
export const PROFILES_TYPE = 'grafana-pyroscope-datasource';
const MAX_ATTRIBUTES = 64;
const MAX_VALUE_LENGTH = 1024;

/** What a link carries from the trace view to the app's page. */
export type SpanRef = {
  traceId: string;
  spanId: string;
  /** The span's start in ms since the epoch, when Grafana said (13.x). */
  startMs?: number;
  /** The trace view's time range (ms), the fallback window when the start is unknown. */
  range?: { from: number; to: number };
  /** The trace view's (Tempo) data source uid. */
  tracesUid?: string;
  /** Resource attributes, first value of each. */
  resource: Record<string, string>;
};

export type ExploreQuery = Record<string, unknown> & { refId: string; datasource: { type: string; uid: string } };
export type ExplorePane = { datasource: string; queries: ExploreQuery[]; range: { from: string; to: string } };

// --------------------------------------------------------------------------------------------- ids and values

/** A trace id as the bridge takes it: 1-32 hex characters, lower-cased; undefined otherwise. */
export function cleanTraceId(value: unknown): string | undefined {
  return typeof value === 'string' && /^[0-9a-fA-F]{1,32}$/.test(value) ? value.toLowerCase() : undefined;
}

/** A span id: exactly 16 hex characters, lower-cased; undefined otherwise. */
export function cleanSpanId(value: unknown): string | undefined {
  return typeof value === 'string' && /^[0-9a-fA-F]{16}$/.test(value) ? value.toLowerCase() : undefined;
}

function finiteNumber(value: unknown): number | undefined {
  const n = typeof value === 'string' && value.trim() !== '' ? Number(value) : value;
  return typeof n === 'number' && Number.isFinite(n) ? n : undefined;
}

/** A label value inside double quotes in a Prometheus-style selector: backslash, quote and newline escaped. */
export function quoteLabelValue(value: string): string {
  return '"' + value.replace(/\\/g, '\\\\').replace(/"/g, '\\"').replace(/\n/g, '\\n') + '"';
}

const LABEL_NAME = /^[a-zA-Z_][a-zA-Z0-9_]*$/;

/** `{service_name="shop", …}`: each mapped resource attribute the span has, as a profile label (`{}` for none). */
export function labelSelector(tags: Tag[], resource: Record<string, string>): string {
  const matchers: string[] = [];
  for (const { key, value } of tags) {
    const label = value || key;
    const attr = resource[key];
    if (attr && LABEL_NAME.test(label)) {
      matchers.push(`${label}=${quoteLabelValue(attr)}`);
    }
  }
  return `{${matchers.join(', ')}}`;
}

/** The settings with their defaults filled in and the URLs without a trailing slash. */
export function withDefaults(settings: AppSettings | undefined): Required<AppSettings> {
  const s = settings ?? {};
  return {
    bridgeUrl: (s.bridgeUrl ?? '').trim().replace(/\/+$/, ''),
    bridgeServerUrl: (s.bridgeServerUrl ?? '').trim().replace(/\/+$/, ''),
    tracesUid: s.tracesUid || DEFAULT_TRACES_UID,
    profilesUid: s.profilesUid || DEFAULT_PROFILES_UID,
    profileTypeId: s.profileTypeId || DEFAULT_PROFILE_TYPE,
    tags: Array.isArray(s.tags) && s.tags.length > 0 ? s.tags : DEFAULT_TAGS,
  };
}

/** Is `url` an absolute http(s) URL? The bridge URL must be, or the links would resolve inside Grafana. */
export function isHttpUrl(url: string): boolean {
  try {
    const parsed = new URL(url);
    return (parsed.protocol === 'http:' || parsed.protocol === 'https:') && parsed.host !== '';
  } catch {
    return false;
  }
}

// --------------------------------------------------------------------------------------------- contexts → SpanRef

function firstValues(attributes: Record<string, string[]> | undefined): Record<string, string> {
  const out: Record<string, string> = {};
  if (!attributes || typeof attributes !== 'object') {
    return out;
  }
  for (const [key, values] of Object.entries(attributes).slice(0, MAX_ATTRIBUTES)) {
    const first = Array.isArray(values) ? values[0] : values;
    if (typeof first === 'string' && first.length <= MAX_VALUE_LENGTH) {
      out[key] = first;
    }
  }
  return out;
}

/** What the resource-attributes context says about the span; undefined when it has no usable span (no span id:
 * Grafana before 12.4) or the data source is not Tempo (the bridge finds traces in Tempo or its own store). */
export function spanRefFromContext(ctx: ResourceAttributesContext | undefined): SpanRef | undefined {
  if (!ctx || ctx.datasource?.type !== TEMPO_TYPE) {
    return undefined;
  }
  const traceId = cleanTraceId(ctx.traceID);
  const spanId = cleanSpanId(ctx.spanID);
  if (!traceId || !spanId) {
    return undefined;
  }
  const startUs = finiteNumber(ctx.spanStartTime);
  const from = finiteNumber(ctx.timeRange?.from);
  const to = finiteNumber(ctx.timeRange?.to);
  return {
    traceId,
    spanId,
    startMs: startUs !== undefined && startUs > 0 ? Math.floor(startUs / 1000) : undefined,
    range: from !== undefined && to !== undefined && to >= from ? { from, to } : undefined,
    tracesUid: ctx.datasource?.uid || undefined,
    resource: firstValues(ctx.attributes),
  };
}

/** The trace's root span: no parent in the trace, earliest first. */
export function rootSpanId(ctx: TraceHeaderContext | undefined): string | undefined {
  const spans = Array.isArray(ctx?.spans) ? ctx!.spans : [];
  const ids = new Set(spans.map((s) => s.spanID));
  const roots = spans.filter(
    (s) => !(s.references ?? []).some((r) => r.refType === 'CHILD_OF' && r.spanID !== undefined && ids.has(r.spanID))
  );
  roots.sort((a, b) => (a.startTime ?? 0) - (b.startTime ?? 0) || (a.depth ?? 0) - (b.depth ?? 0));
  return roots.length > 0 ? cleanSpanId(roots[0].spanID) : undefined;
}

// --------------------------------------------------------------------------------------------- SpanRef ⇄ query string

export function spanRefToSearch(ref: SpanRef): URLSearchParams {
  const params = new URLSearchParams({ trace: ref.traceId, span: ref.spanId });
  if (ref.startMs !== undefined) {
    params.set('start', String(ref.startMs));
  }
  if (ref.range) {
    params.set('from', String(ref.range.from));
    params.set('to', String(ref.range.to));
  }
  if (ref.tracesUid) {
    params.set('ds', ref.tracesUid);
  }
  if (Object.keys(ref.resource).length > 0) {
    params.set('resource', JSON.stringify(ref.resource));
  }
  return params;
}

/** The SpanRef an app page was opened with; undefined when its ids are missing or malformed. */
export function spanRefFromSearch(params: URLSearchParams): SpanRef | undefined {
  const traceId = cleanTraceId(params.get('trace'));
  const spanId = cleanSpanId(params.get('span'));
  if (!traceId || !spanId) {
    return undefined;
  }
  const startMs = finiteNumber(params.get('start'));
  const from = finiteNumber(params.get('from'));
  const to = finiteNumber(params.get('to'));
  let resource: Record<string, string> = {};
  try {
    const parsed: unknown = JSON.parse(params.get('resource') ?? '{}');
    if (parsed && typeof parsed === 'object' && !Array.isArray(parsed)) {
      resource = Object.fromEntries(
        Object.entries(parsed as Record<string, unknown>).filter(
          (kv): kv is [string, string] => typeof kv[1] === 'string'
        )
      );
    }
  } catch {
    resource = {};
  }
  return {
    traceId,
    spanId,
    startMs,
    range: from !== undefined && to !== undefined && to >= from ? { from, to } : undefined,
    tracesUid: params.get('ds') || undefined,
    resource,
  };
}

// --------------------------------------------------------------------------------------------- final URLs

export type Scope = 'span' | 'request';

/** The bridge's page of a span (`scope=request`: the whole request's profile, per service); undefined when the
 * bridge URL is not set (or not an http(s) URL) or an id is malformed. */
export function bridgeSpanUrl(
  settings: AppSettings | undefined,
  traceId: string,
  spanId: string,
  scope: Scope = 'span'
): string | undefined {
  const { bridgeUrl } = withDefaults(settings);
  const trace = cleanTraceId(traceId);
  const span = cleanSpanId(spanId);
  if (!bridgeUrl || !isHttpUrl(bridgeUrl) || !trace || !span) {
    return undefined;
  }
  const url = `${bridgeUrl}/spans/${encodeURIComponent(trace)}/${encodeURIComponent(span)}`;
  return scope === 'request' ? `${url}?scope=request` : url;
}

/** The bridge's comparison of a span with its endpoint's usual requests; undefined as `bridgeSpanUrl`. */
export function bridgeCompareUrl(
  settings: AppSettings | undefined,
  traceId: string,
  spanId: string
): string | undefined {
  const span = bridgeSpanUrl(settings, traceId, spanId);
  return span === undefined ? undefined : `${span}/compare`;
}

/** Half an hour each side of the span: where "Hot functions and their requests" looks. */
export const FUNCTIONS_MARGIN_MS = 30 * 60_000;
const MAX_SERVICE_LENGTH = 256;

/** The range the hot functions are read over: the span's start ± 30 min when known, else the trace view's range,
 * else the hour before `now` (ms). */
export function functionsRange(
  startMs: number | undefined,
  range: { from: number; to: number } | undefined,
  now: number
): { from: number; to: number } {
  if (startMs !== undefined) {
    return { from: startMs - FUNCTIONS_MARGIN_MS, to: startMs + FUNCTIONS_MARGIN_MS };
  }
  return range ?? { from: now - 3_600_000, to: now };
}

/** The bridge's page of a service's hottest functions in a range (each links the requests that burn it); undefined
 * when the bridge URL is not set (or not http(s)) or the service is missing or too long. */
export function bridgeFunctionsUrl(
  settings: AppSettings | undefined,
  service: string | undefined,
  range: { from: number; to: number }
): string | undefined {
  const { bridgeUrl } = withDefaults(settings);
  if (!bridgeUrl || !isHttpUrl(bridgeUrl) || !service || service.length > MAX_SERVICE_LENGTH) {
    return undefined;
  }
  const params = new URLSearchParams({
    service,
    from: String(Math.floor(range.from)),
    to: String(Math.ceil(range.to)),
  });
  return `${bridgeUrl}/functions/spans?${params.toString()}`;
}

/** The window of the Explore panes: a minute each side of the span's start when known, else the trace view's
 * range, else the last hour before `now`. */
export function exploreRange(ref: SpanRef, now: number): { from: string; to: string } {
  if (ref.startMs !== undefined) {
    return { from: String(ref.startMs - QUERY_MARGIN_MS), to: String(ref.startMs + QUERY_MARGIN_MS) };
  }
  if (ref.range) {
    return { from: String(ref.range.from), to: String(ref.range.to) };
  }
  return { from: String(now - 3_600_000), to: String(now) };
}

/** Explore's `panes`: the trace (its own Tempo data source) beside the span's profile query, the one Grafana's
 * "Profiles for this span" sends (`queryType: profile`, a span selector of what the bridge's Tempo mount writes into
 * `pyroscope.profile.id`: `<span id>:<trace id>`, so any bridge process resolves it without searching Tempo). */
export function explorePanes(
  settings: AppSettings | undefined,
  ref: SpanRef,
  now: number
): Record<string, ExplorePane> {
  const s = withDefaults(settings);
  const range = exploreRange(ref, now);
  const tracesUid = ref.tracesUid || s.tracesUid;
  return {
    trace: {
      datasource: tracesUid,
      queries: [
        { refId: 'A', datasource: { type: TEMPO_TYPE, uid: tracesUid }, queryType: 'traceql', query: ref.traceId },
      ],
      range,
    },
    profile: {
      datasource: s.profilesUid,
      queries: [
        {
          refId: 'profile',
          datasource: { type: PROFILES_TYPE, uid: s.profilesUid },
          queryType: 'profile',
          profileTypeId: s.profileTypeId,
          labelSelector: labelSelector(s.tags, ref.resource),
          spanSelector: [carriedSpanId(ref)],
          groupBy: [],
        },
      ],
      range,
    },
  };
}

/** The span selector entry the bridge reads as a span and its trace (it sends only the span id on to Pyroscope). */
export function carriedSpanId(ref: Pick<SpanRef, 'spanId' | 'traceId'>): string {
  return `${ref.spanId}:${ref.traceId}`;
}

/** Grafana's Explore URL (relative to Grafana's root) for the panes. */
export function exploreUrl(settings: AppSettings | undefined, ref: SpanRef, now: number): string {
  const params = new URLSearchParams({ schemaVersion: '1', panes: JSON.stringify(explorePanes(settings, ref, now)) });
  return `/explore?${params.toString()}`;
}

// --------------------------------------------------------------------------------------------- the links' configure()

type LinkOverride = { path: string } | undefined;

/** "Related profiles": the app's `span` page for this span (it goes on to the bridge's span page). */
export function configureRelatedProfiles(ctx: ResourceAttributesContext | undefined): LinkOverride {
  const ref = spanRefFromContext(ctx);
  if (!ref) {
    return undefined;
  }
  const params = new URLSearchParams({ trace: ref.traceId, span: ref.spanId });
  return { path: `${PLUGIN_BASE_URL}/span?${params.toString()}` };
}

/** "Related profiles in Explore": the app's `explore` page, carrying what the panes need. */
export function configureRelatedExplore(ctx: ResourceAttributesContext | undefined): LinkOverride {
  const ref = spanRefFromContext(ctx);
  if (!ref) {
    return undefined;
  }
  return { path: `${PLUGIN_BASE_URL}/explore?${spanRefToSearch(ref).toString()}` };
}

/** "Request profile" in the trace header: the app's `span` page for the root span, request scope. */
export function configureRequestProfile(ctx: TraceHeaderContext | undefined): LinkOverride {
  if (!ctx || ctx.datasource?.type !== TEMPO_TYPE) {
    return undefined;
  }
  const traceId = cleanTraceId(ctx.traceID);
  const spanId = rootSpanId(ctx);
  if (!traceId || !spanId) {
    return undefined;
  }
  const params = new URLSearchParams({ trace: traceId, span: spanId, scope: 'request' });
  return { path: `${PLUGIN_BASE_URL}/span?${params.toString()}` };
}

/** "Compare with usual": the app's `span` page in its compare view (it goes on to the bridge's compare page). */
export function configureCompareWithUsual(ctx: ResourceAttributesContext | undefined): LinkOverride {
  const ref = spanRefFromContext(ctx);
  if (!ref) {
    return undefined;
  }
  const params = new URLSearchParams({ trace: ref.traceId, span: ref.spanId, view: 'compare' });
  return { path: `${PLUGIN_BASE_URL}/span?${params.toString()}` };
}

/** "Hot functions and their requests": the app's `functions` page for the span's service, carrying the span's
 * start and the trace view's range (the page picks the window); hidden without a service name. */
export function configureHotFunctions(ctx: ResourceAttributesContext | undefined): LinkOverride {
  const ref = spanRefFromContext(ctx);
  const service = ref?.resource['service.name'];
  if (!ref || !service || service.length > MAX_SERVICE_LENGTH) {
    return undefined;
  }
  const params = new URLSearchParams({ service });
  if (ref.startMs !== undefined) {
    params.set('start', String(ref.startMs));
  }
  if (ref.range) {
    params.set('from', String(ref.range.from));
    params.set('to', String(ref.range.to));
  }
  return { path: `${PLUGIN_BASE_URL}/functions?${params.toString()}` };
}

/** What the `functions` page was opened with: the service and the range to read (undefined without a service). */
export function functionsFromSearch(
  params: URLSearchParams,
  now: number
): { service: string; range: { from: number; to: number } } | undefined {
  const service = params.get('service') ?? '';
  if (!service || service.length > MAX_SERVICE_LENGTH) {
    return undefined;
  }
  const start = finiteNumber(params.get('start'));
  const from = finiteNumber(params.get('from'));
  const to = finiteNumber(params.get('to'));
  const range = from !== undefined && to !== undefined && to > from ? { from, to } : undefined;
  return { service, range: functionsRange(start !== undefined && start > 0 ? start : undefined, range, now) };
}
