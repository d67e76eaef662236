import React, { useEffect, useState } from 'react';
import { css } from '@emotion/css';
import { GrafanaTheme2 } from '@grafana/data';
import { config, PluginPage } from '@grafana/runtime';
import { Alert, Badge, BadgeColor, LoadingPlaceholder, RadioButtonGroup, useStyles2 } from '@grafana/ui';
import { errorText, fetchSlowest, Mode, SlowestAnswer, SlowRequest } from '../api';
import { bridgeSpanUrl, exploreUrl, withDefaults } from '../links';
import { Link } from '../components/Link';
import { testIds } from '../testIds';
import { AppSettings, PLUGIN_ID } from '../types';

export const WINDOWS = ['15m', '1h', '6h', '24h'] as const;
export const PER_SERVICE = 10;

const MODE_COLOURS: Record<Mode, BadgeColor> = {
  linked: 'green',
  'local-root': 'blue',
  'time-window': 'orange',
  none: 'red',
};

type Props = { settings?: AppSettings; now?: () => number };

/** The answer for one window (`since`); while it is not the window shown, the page is loading. */
type State = { since: string; answer?: SlowestAnswer; error?: string };

function ModeBadge({ req }: { req: SlowRequest }) {
  if (!req.resolution) {
    return (
      <span data-testid={testIds.requests.badge} title={req.error?.message}>
        <Badge color="purple" text="error" icon="exclamation-triangle" />
      </span>
    );
  }
  return (
    <span data-testid={testIds.requests.badge} title={req.resolution.reason}>
      <Badge color={MODE_COLOURS[req.resolution.mode] ?? 'red'} text={req.resolution.mode} />
    </span>
  );
}

function Row({ req, settings, now }: { req: SlowRequest; settings?: AppSettings; now: () => number }) {
  const span = bridgeSpanUrl(settings, req.traceId, req.spanId);
  const request = bridgeSpanUrl(settings, req.traceId, req.spanId, 'request');
  const startMs = Math.floor(Number(req.startTimeUnixNano) / 1e6);
  const explore = exploreUrl(
    settings,
    {
      traceId: req.traceId,
      spanId: req.spanId,
      startMs: Number.isFinite(startMs) ? startMs : undefined,
      resource: req.resource ?? {},
    },
    now()
  );
  return (
    <tr data-testid={testIds.requests.row}>
      <td>
        {span ? (
          <Link href={span} external>
            {req.name}
          </Link>
        ) : (
          req.name
        )}
      </td>
      <td className="num">{req.duration}</td>
      <td className="num">{req.spansBelow}</td>
      <td>
        <ModeBadge req={req} />
      </td>
      <td>
        {request && (
          <>
            <Link href={request} external>
              request
            </Link>{' '}
            ·{' '}
          </>
        )}
        <Link href={`${config.appSubUrl ?? ''}${explore}`}>Explore</Link>
      </td>
      <td className="mono">{req.traceId}</td>
    </tr>
  );
}

/** The slowest recent requests per service (local-root spans), each with how its profile resolves, from the
 * bridge's `GET /api/v1/requests/slowest` through the plugin's proxy route. */
export function SlowRequests({ settings, now = Date.now }: Props) {
  const styles = useStyles2(getStyles);
  const [since, setSince] = useState<string>('1h');
  const [state, setState] = useState<State | undefined>();
  const loading = state?.since !== since;
  const s = withDefaults(settings);

  useEffect(() => {
    let live = true;
    fetchSlowest(since, PER_SERVICE).then(
      (answer) => live && setState({ since, answer }),
      (err) => live && setState({ since, error: errorText(err) })
    );
    return () => {
      live = false;
    };
  }, [since]);

  return (
    <PluginPage>
      <div data-testid={testIds.requests.container} className={styles.page}>
        {!s.bridgeServerUrl && (
          <Alert severity="warning" title="The bridge is not configured">
            Set the bridge&apos;s URLs on the <Link href={`/plugins/${PLUGIN_ID}`}>configuration page</Link>.
          </Alert>
        )}
        {s.bridgeServerUrl && !s.bridgeUrl && (
          <Alert severity="info" title="No links to the bridge's pages">
            The bridge URL as your browser reaches it is not set: the list shows, its span pages are not linked.
          </Alert>
        )}
        <RadioButtonGroup
          options={WINDOWS.map((w) => ({ label: w, value: w }))}
          value={since}
          onChange={(value) => setSince(value)}
        />
        {loading && <LoadingPlaceholder text="Asking the bridge…" />}
        {!loading && state?.error && (
          <Alert severity="error" title="The bridge did not answer">
            {state.error}
          </Alert>
        )}
        {!loading && state?.answer && <Answer answer={state.answer} settings={settings} now={now} />}
      </div>
    </PluginPage>
  );
}

function Answer({ answer, settings, now }: { answer: SlowestAnswer; settings?: AppSettings; now: () => number }) {
  const styles = useStyles2(getStyles);
  return (
    <>
      <p className={styles.muted}>
        Local-root spans (the requests each service served) of {answer.traces} recent traces, {answer.mode} mode,
        profile type <code>{answer.profileType}</code>.
      </p>
      {answer.services.length === 0 && <p>No traces in the last {answer.since}.</p>}
      {answer.services.map(({ service, requests }) => (
        <section key={service} data-testid={testIds.requests.service}>
          <h3>{service || '(unknown service)'}</h3>
          <table className={styles.table}>
            <thead>
              <tr>
                <th>span</th>
                <th>duration</th>
                <th>spans below</th>
                <th>resolution</th>
                <th>open</th>
                <th>trace</th>
              </tr>
            </thead>
            <tbody>
              {requests.map((req) => (
                <Row key={`${req.traceId}/${req.spanId}`} req={req} settings={settings} now={now} />
              ))}
            </tbody>
          </table>
        </section>
      ))}
    </>
  );
}

const getStyles = (theme: GrafanaTheme2) => ({
  page: css({ display: 'flex', flexDirection: 'column', gap: theme.spacing(2) }),
  muted: css({ color: theme.colors.text.secondary }),
  table: css({
    width: '100%',
    marginBottom: theme.spacing(3),
    'th, td': {
      padding: theme.spacing(0.5, 1),
      borderBottom: `1px solid ${theme.colors.border.weak}`,
      textAlign: 'left',
    },
    '.num': { textAlign: 'right', fontVariantNumeric: 'tabular-nums' },
    '.mono': { fontFamily: theme.typography.fontFamilyMonospace, fontSize: theme.typography.bodySmall.fontSize },
  }),
});
