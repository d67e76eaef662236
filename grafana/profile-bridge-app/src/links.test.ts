import {
  bridgeCompareUrl,
  bridgeFunctionsUrl,
  bridgeSpanUrl,
  configureCompareWithUsual,
  configureHotFunctions,
  configureRelatedExplore,
  configureRelatedProfiles,
  configureRequestProfile,
  explorePanes,
  exploreUrl,
  functionsFromSearch,
  labelSelector,
  quoteLabelValue,
  rootSpanId,
  spanRefFromContext,
  spanRefFromSearch,
} from './links';
import { AppSettings, ResourceAttributesContext, TraceHeaderContext } from './types';

const TRACE = '9ec1b914dcf8fa8d54837b7c570b1af9';
const SPAN = '5a816dd003bf6b81';
const START_US = 1_795_945_303_639_345; // the trace view's unit
const START_MS = 1_795_945_303_639;
const NOW = 1_795_945_400_000;

const SETTINGS: AppSettings = {
  bridgeUrl: 'http://localhost:4041/',
  bridgeServerUrl: 'http://bridge:4041',
  profilesUid: 'profiles-1',
  profileTypeId: 'process_cpu:cpu:nanoseconds:cpu:nanoseconds',
  tags: [
    { key: 'service.name', value: 'service_name' },
    { key: 'service.namespace', value: 'service_namespace' },
  ],
};

function spanContext(changes: Partial<ResourceAttributesContext> = {}): ResourceAttributesContext {
  return {
    attributes: { 'service.name': ['shop-backend'], 'service.namespace': ['shop'], 'host.name': ['h1'] },
    spanAttributes: { 'http.route': ['/price'] },
    timeRange: { from: NOW - 3_600_000, to: NOW },
    datasource: { type: 'tempo', uid: 'profile-bridge-tempo' },
    traceID: TRACE,
    spanID: SPAN,
    spanStartTime: START_US,
    ...changes,
  };
}

/** Follows a link the way Grafana and the app do: the link's path (inside the app) → the app page's query → the
 * final URL. */
function appQuery(path: string): URLSearchParams {
  const url = new URL(path, 'http://grafana.invalid');
  return url.searchParams;
}

function panesOf(explore: string): Record<string, any> {
  const url = new URL(explore, 'http://grafana.invalid');
  expect(url.pathname).toBe('/explore');
  expect(url.searchParams.get('schemaVersion')).toBe('1');
  return JSON.parse(url.searchParams.get('panes')!);
}

describe('Related profiles (the bridge span page)', () => {
  test('a span context gives a link inside the app that goes on to the bridge span page', () => {
    const link = configureRelatedProfiles(spanContext());
    expect(link).toEqual({ path: `/a/profile-bridge-app/span?trace=${TRACE}&span=${SPAN}` });
    const query = appQuery(link!.path);
    expect(bridgeSpanUrl(SETTINGS, query.get('trace')!, query.get('span')!)).toBe(
      `http://localhost:4041/spans/${TRACE}/${SPAN}`
    );
    expect(bridgeSpanUrl(SETTINGS, TRACE, SPAN, 'request')).toBe(
      `http://localhost:4041/spans/${TRACE}/${SPAN}?scope=request`
    );
  });

  test('upper-case ids are the same span', () => {
    const link = configureRelatedProfiles(spanContext({ traceID: TRACE.toUpperCase(), spanID: SPAN.toUpperCase() }));
    expect(link?.path).toBe(`/a/profile-bridge-app/span?trace=${TRACE}&span=${SPAN}`);
  });

  test.each([
    ['no span id (Grafana before 12.4)', { spanID: undefined }],
    ['no trace id', { traceID: undefined }],
    ['a span id of the wrong length', { spanID: 'abc' }],
    ['a span id that is a path', { spanID: '../../../admin/x' }],
    ['a trace id with a query', { traceID: `${TRACE}?evil=1` }],
    ['a data source that is not Tempo', { datasource: { type: 'jaeger', uid: 'j' } }],
  ])('%s gives no link rather than a broken one', (_, changes) => {
    const ctx = spanContext(changes as Partial<ResourceAttributesContext>);
    expect(configureRelatedProfiles(ctx)).toBeUndefined();
    expect(configureRelatedExplore(ctx)).toBeUndefined();
  });

  test('no context at all gives no link', () => {
    expect(configureRelatedProfiles(undefined)).toBeUndefined();
    expect(configureRelatedExplore(undefined)).toBeUndefined();
  });

  test('without a bridge URL (or with one that is not http) there is no bridge URL to open', () => {
    expect(bridgeSpanUrl({}, TRACE, SPAN)).toBeUndefined();
    expect(bridgeSpanUrl({ bridgeUrl: 'javascript:alert(1)' }, TRACE, SPAN)).toBeUndefined();
    expect(bridgeSpanUrl({ bridgeUrl: '/relative' }, TRACE, SPAN)).toBeUndefined();
    expect(bridgeSpanUrl(SETTINGS, '../x', SPAN)).toBeUndefined();
  });
});

describe('Related profiles in Explore', () => {
  test('the panes: the trace beside the span profile query, URL-encoded, on the right data sources', () => {
    const link = configureRelatedExplore(spanContext());
    expect(link?.path.startsWith('/a/profile-bridge-app/explore?')).toBe(true);
    const ref = spanRefFromSearch(appQuery(link!.path));
    expect(ref).toBeDefined();
    const url = exploreUrl(SETTINGS, ref!, NOW);
    // URL-encoded: the JSON's braces, quotes and spaces never appear raw in the URL
    expect(url).not.toMatch(/[{}"\s]/);
    const panes = panesOf(url);
    const range = { from: String(START_MS - 60_000), to: String(START_MS + 60_000) };
    expect(panes).toEqual({
      trace: {
        datasource: 'profile-bridge-tempo',
        queries: [
          {
            refId: 'A',
            datasource: { type: 'tempo', uid: 'profile-bridge-tempo' },
            queryType: 'traceql',
            query: TRACE,
          },
        ],
        range,
      },
      profile: {
        datasource: 'profiles-1',
        queries: [
          {
            refId: 'profile',
            datasource: { type: 'grafana-pyroscope-datasource', uid: 'profiles-1' },
            queryType: 'profile',
            profileTypeId: 'process_cpu:cpu:nanoseconds:cpu:nanoseconds',
            labelSelector: '{service_name="shop-backend", service_namespace="shop"}',
            spanSelector: [`${SPAN}:${TRACE}`],
            groupBy: [],
          },
        ],
        range,
      },
    });
  });

  test('without the span start (Grafana 12.4) the window is the trace view range', () => {
    const ref = spanRefFromContext(spanContext({ spanStartTime: undefined }));
    const panes = explorePanes(SETTINGS, ref!, NOW);
    expect(panes.profile.range).toEqual({ from: String(NOW - 3_600_000), to: String(NOW) });
  });

  test('defaults: the provisioned uids and profile type, the service labels', () => {
    const panes = explorePanes({}, spanRefFromContext(spanContext())!, NOW);
    const query = panes.profile.queries[0];
    expect(query.datasource).toEqual({ type: 'grafana-pyroscope-datasource', uid: 'profile-bridge-pyroscope' });
    expect(query.profileTypeId).toBe('process_cpu:cpu:nanoseconds:cpu:nanoseconds');
    expect(query.labelSelector).toBe('{service_name="shop-backend", service_namespace="shop"}');
  });

  test('hostile attribute values are encoded, never injected', () => {
    const evil = 'x", service_name=~".+"} | {a="\\\n&panes=&orgId=2#/../admin';
    const ctx = spanContext({
      attributes: { 'service.name': [evil], 'service.namespace': ['<script>alert(1)</script>'] },
      datasource: { type: 'tempo', uid: 'tempo"&x=1' },
    });
    const link = configureRelatedExplore(ctx)!;
    const query = appQuery(link.path);
    // the link carries exactly its own parameters: nothing added by a value
    expect([...new Set(query.keys())].sort()).toEqual(['ds', 'from', 'resource', 'span', 'start', 'to', 'trace']);
    expect(link.path.split('?')[0]).toBe('/a/profile-bridge-app/explore');
    const url = exploreUrl(SETTINGS, spanRefFromSearch(query)!, NOW);
    const parsed = new URL(url, 'http://grafana.invalid');
    expect([...parsed.searchParams.keys()].sort()).toEqual(['panes', 'schemaVersion']);
    const panes = panesOf(url);
    const selector = panes.profile.queries[0].labelSelector;
    expect(selector).toBe(`{service_name=${quoteLabelValue(evil)}, service_namespace="<script>alert(1)</script>"}`);
    // one matcher per mapped attribute: the quote inside the value is escaped, so it cannot close the value
    expect(selector).toContain('service_name="x\\", service_name=~\\".+\\"} | {a=\\"\\\\\\n&panes=&orgId=2#/../admin"');
    expect(panes.trace.datasource).toBe('tempo"&x=1');
    expect(panes.profile.queries[0].spanSelector).toEqual([`${SPAN}:${TRACE}`]);
  });

  test('a malformed app page query opens nothing', () => {
    expect(spanRefFromSearch(new URLSearchParams('trace=zz&span=' + SPAN))).toBeUndefined();
    expect(spanRefFromSearch(new URLSearchParams(`trace=${TRACE}`))).toBeUndefined();
    const ref = spanRefFromSearch(new URLSearchParams(`trace=${TRACE}&span=${SPAN}&resource=not-json&start=x`));
    expect(ref).toEqual({
      traceId: TRACE,
      spanId: SPAN,
      startMs: undefined,
      range: undefined,
      tracesUid: undefined,
      resource: {},
    });
  });
});

describe('label selectors', () => {
  test.each([
    ['plain', 'shop', '"shop"'],
    ['quote', 'a"b', '"a\\"b"'],
    ['backslash', 'a\\b', '"a\\\\b"'],
    ['newline', 'a\nb', '"a\\nb"'],
  ])('%s values are quoted', (_, value, quoted) => {
    expect(quoteLabelValue(value)).toBe(quoted);
  });

  test('unmapped attributes and invalid label names are left out', () => {
    expect(labelSelector([{ key: 'service.name', value: 'service_name' }], {})).toBe('{}');
    expect(labelSelector([{ key: 'k8s.pod.name', value: 'pod name' }], { 'k8s.pod.name': 'p' })).toBe('{}');
    expect(labelSelector([{ key: 'service', value: '' }], { service: 's' })).toBe('{service="s"}');
  });
});

describe('Request profile (trace header)', () => {
  const trace: TraceHeaderContext = {
    traceID: TRACE,
    datasource: { name: 'Tempo', type: 'tempo', uid: 'profile-bridge-tempo' },
    spans: [
      {
        spanID: 'bbbbbbbbbbbbbbbb',
        startTime: 20,
        depth: 1,
        references: [{ refType: 'CHILD_OF', spanID: 'aaaaaaaaaaaaaaaa' }],
      },
      { spanID: 'aaaaaaaaaaaaaaaa', startTime: 10, depth: 0, references: [] },
      // a parent outside the trace (not fetched): a root candidate, but a later one
      {
        spanID: 'cccccccccccccccc',
        startTime: 30,
        depth: 0,
        references: [{ refType: 'CHILD_OF', spanID: 'ffffffffffffffff' }],
      },
    ],
  };

  test("opens the bridge's request-scope page of the root span", () => {
    expect(rootSpanId(trace)).toBe('aaaaaaaaaaaaaaaa');
    const link = configureRequestProfile(trace);
    expect(link).toEqual({ path: `/a/profile-bridge-app/span?trace=${TRACE}&span=aaaaaaaaaaaaaaaa&scope=request` });
    const query = appQuery(link!.path);
    expect(bridgeSpanUrl(SETTINGS, query.get('trace')!, query.get('span')!, 'request')).toBe(
      `http://localhost:4041/spans/${TRACE}/aaaaaaaaaaaaaaaa?scope=request`
    );
  });

  test('no spans, a bad trace id or another data source: no link', () => {
    expect(configureRequestProfile({ ...trace, spans: [] })).toBeUndefined();
    expect(configureRequestProfile({ ...trace, traceID: 'not/hex' })).toBeUndefined();
    expect(configureRequestProfile({ ...trace, datasource: { type: 'zipkin' } })).toBeUndefined();
    expect(configureRequestProfile(undefined)).toBeUndefined();
  });
});

describe('Compare with usual', () => {
  test("a span context gives the app's span page in its compare view, which goes on to the bridge's compare page", () => {
    const link = configureCompareWithUsual(spanContext());
    expect(link).toEqual({ path: `/a/profile-bridge-app/span?trace=${TRACE}&span=${SPAN}&view=compare` });
    const query = appQuery(link!.path);
    expect(bridgeCompareUrl(SETTINGS, query.get('trace')!, query.get('span')!)).toBe(
      `http://localhost:4041/spans/${TRACE}/${SPAN}/compare`
    );
  });

  test.each([
    ['no span id (Grafana before 12.4)', { spanID: undefined }],
    ['a span id that is a path', { spanID: '../../../admin/x' }],
    ['a data source that is not Tempo', { datasource: { type: 'jaeger', uid: 'j' } }],
  ])('%s gives no link', (_, changes) => {
    expect(configureCompareWithUsual(spanContext(changes as Partial<ResourceAttributesContext>))).toBeUndefined();
  });

  test('no bridge URL, or a bad id: nothing to open', () => {
    expect(bridgeCompareUrl({}, TRACE, SPAN)).toBeUndefined();
    expect(bridgeCompareUrl({ bridgeUrl: 'javascript:alert(1)' }, TRACE, SPAN)).toBeUndefined();
    expect(bridgeCompareUrl(SETTINGS, TRACE, '../x')).toBeUndefined();
  });
});

describe('Hot functions and their requests', () => {
  test("the span's service and start go to the app's functions page, then to the bridge, the start ± 30 min", () => {
    const link = configureHotFunctions(spanContext());
    expect(link?.path.split('?')[0]).toBe('/a/profile-bridge-app/functions');
    const query = appQuery(link!.path);
    expect([...query.keys()].sort()).toEqual(['from', 'service', 'start', 'to']);
    const wanted = functionsFromSearch(query, NOW)!;
    expect(wanted).toEqual({
      service: 'shop-backend',
      range: { from: START_MS - 1_800_000, to: START_MS + 1_800_000 },
    });
    expect(bridgeFunctionsUrl(SETTINGS, wanted.service, wanted.range)).toBe(
      `http://localhost:4041/functions/spans?service=shop-backend&from=${START_MS - 1_800_000}&to=${START_MS + 1_800_000}`
    );
  });

  test("without the span start (Grafana 12.4) the trace view's range, without that the last hour", () => {
    const query = appQuery(configureHotFunctions(spanContext({ spanStartTime: undefined }))!.path);
    expect(functionsFromSearch(query, NOW)!.range).toEqual({ from: NOW - 3_600_000, to: NOW });
    const bare = functionsFromSearch(new URLSearchParams('service=shop-backend'), NOW);
    expect(bare!.range).toEqual({ from: NOW - 3_600_000, to: NOW });
  });

  test('a hostile service name is encoded, never a path or another parameter', () => {
    const evil = 'x&function=evil#/../../admin?';
    const link = configureHotFunctions(spanContext({ attributes: { 'service.name': [evil] } }))!;
    const wanted = functionsFromSearch(appQuery(link.path), NOW)!;
    expect(wanted.service).toBe(evil);
    const url = new URL(bridgeFunctionsUrl(SETTINGS, wanted.service, wanted.range)!);
    expect(url.pathname).toBe('/functions/spans');
    expect([...url.searchParams.keys()].sort()).toEqual(['from', 'service', 'to']);
    expect(url.searchParams.get('service')).toBe(evil);
  });

  test('no service, a too long one, no span or no bridge URL: no link or nothing to open', () => {
    expect(configureHotFunctions(spanContext({ attributes: {} }))).toBeUndefined();
    expect(configureHotFunctions(spanContext({ attributes: { 'service.name': ['s'.repeat(300)] } }))).toBeUndefined();
    expect(configureHotFunctions(spanContext({ spanID: undefined }))).toBeUndefined();
    expect(configureHotFunctions(undefined)).toBeUndefined();
    expect(functionsFromSearch(new URLSearchParams('from=1&to=2'), NOW)).toBeUndefined();
    expect(bridgeFunctionsUrl({}, 'shop-backend', { from: 1, to: 2 })).toBeUndefined();
    expect(bridgeFunctionsUrl(SETTINGS, '', { from: 1, to: 2 })).toBeUndefined();
  });
});
