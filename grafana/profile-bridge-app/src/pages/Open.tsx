import React, { useEffect, useMemo } from 'react';
import { useLocation } from 'react-router-dom';
import { locationService, PluginPage } from '@grafana/runtime';
import { Alert } from '@grafana/ui';
import {
  bridgeCompareUrl,
  bridgeFunctionsUrl,
  bridgeSpanUrl,
  cleanSpanId,
  cleanTraceId,
  exploreUrl,
  functionsFromSearch,
  spanRefFromSearch,
} from '../links';
import { Link } from '../components/Link';
import { testIds } from '../testIds';
import { AppSettings, PLUGIN_ID } from '../types';

type Props = {
  settings?: AppSettings;
  /** Leaves Grafana for the bridge's page (tests pass their own). */
  go?: (url: string) => void;
  /** Now in ms (tests pass their own). */
  now?: () => number;
};

const CONFIG_PATH = `/plugins/${PLUGIN_ID}`;

/** Leaves Grafana for the bridge (one function, so the effect below runs once per URL). */
const leave = (url: string) => window.location.assign(url);

function Missing({ title, children }: { title: string; children: React.ReactNode }) {
  return (
    <PluginPage>
      <div data-testid={testIds.open.container}>
        <Alert severity="warning" title={title}>
          {children}
        </Alert>
      </div>
    </PluginPage>
  );
}

/** Goes on to ``url`` once per URL, saying where; without what the page needs (``wanted``), says what is missing
 * (``title`` and ``children``); without the bridge URL, where to set it. */
function Leave({
  url,
  go,
  wanted,
  title,
  children,
}: {
  url: string | undefined;
  go: (url: string) => void;
  wanted: boolean;
  title: string;
  children: React.ReactNode;
}) {
  useEffect(() => {
    if (url) {
      go(url);
    }
  }, [url, go]);

  if (!wanted) {
    return <Missing title={title}>{children}</Missing>;
  }
  if (!url) {
    return (
      <Missing title="The bridge URL is not set">
        Set the bridge&apos;s URL as your browser reaches it on the <Link href={CONFIG_PATH}>configuration page</Link>{' '}
        (or provision <code>jsonData.bridgeUrl</code>).
      </Missing>
    );
  }
  return (
    <PluginPage>
      <div data-testid={testIds.open.container}>
        Opening{' '}
        <Link href={url} external>
          {url}
        </Link>
        …
      </div>
    </PluginPage>
  );
}

/** Where "Related profiles", "Request profile" and "Compare with usual" land: goes on to the bridge's span page
 * (`<bridgeUrl>/spans/<trace>/<span>[?scope=request]`) or, with `view=compare`, its comparison with the usual
 * requests (`<bridgeUrl>/spans/<trace>/<span>/compare`). */
export function OpenSpan({ settings, go = leave }: Props) {
  const { search } = useLocation();
  const params = useMemo(() => new URLSearchParams(search), [search]);
  const traceId = cleanTraceId(params.get('trace'));
  const spanId = cleanSpanId(params.get('span'));
  const scope = params.get('scope') === 'request' ? 'request' : 'span';
  const compare = params.get('view') === 'compare';
  const url =
    traceId && spanId
      ? compare
        ? bridgeCompareUrl(settings, traceId, spanId)
        : bridgeSpanUrl(settings, traceId, spanId, scope)
      : undefined;

  return (
    <Leave url={url} go={go} wanted={Boolean(traceId && spanId)} title="No span to open">
      This page opens the bridge&apos;s page of a span: it needs a trace id (hex) and a 16-hex-character span id.
    </Leave>
  );
}

/** Where "Hot functions and their requests" lands: goes on to the bridge's page of the service's hottest functions
 * around the span (`<bridgeUrl>/functions/spans?service=…&from=…&to=…`). */
export function OpenFunctions({ settings, go = leave, now = Date.now }: Props) {
  const { search } = useLocation();
  const wanted = useMemo(() => functionsFromSearch(new URLSearchParams(search), now()), [search, now]);
  const url = wanted ? bridgeFunctionsUrl(settings, wanted.service, wanted.range) : undefined;

  return (
    <Leave url={url} go={go} wanted={Boolean(wanted)} title="No service to open">
      This page opens the bridge&apos;s list of a service&apos;s hot functions: it needs a service name.
    </Leave>
  );
}

/** Where "Related profiles in Explore" lands: goes on to Explore, split between the trace and the span's profile. */
export function OpenExplore({ settings, now = Date.now }: Props) {
  const { search } = useLocation();
  const ref = useMemo(() => spanRefFromSearch(new URLSearchParams(search)), [search]);
  const url = ref ? exploreUrl(settings, ref, now()) : undefined;

  useEffect(() => {
    if (url) {
      locationService.replace(url);
    }
  }, [url]);

  if (!url) {
    return (
      <Missing title="No span to open">
        This page opens Explore for a span: it needs a trace id (hex) and a 16-hex-character span id.
      </Missing>
    );
  }
  return (
    <PluginPage>
      <div data-testid={testIds.open.container}>Opening Explore…</div>
    </PluginPage>
  );
}
