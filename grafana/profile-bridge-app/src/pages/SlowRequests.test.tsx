import React from 'react';
import { fireEvent, render, screen, waitFor, within } from '@testing-library/react';
import { bridgeAnswer, fakeBackend } from '../testing/fakeBackend';
import type { SlowestAnswer } from '../api';
import { testIds } from '../testIds';
import { SlowRequests } from './SlowRequests';

const slowest = bridgeAnswer<SlowestAnswer>('slowest.json');
const ROUTE = 'GET /api/plugin-proxy/profile-bridge-app/api/v1/requests/slowest';
const SETTINGS = { bridgeUrl: 'http://localhost:4041', bridgeServerUrl: 'http://bridge:4041', profilesUid: 'prof' };
const NOW = () => 1_795_945_400_000;

describe('the app page: slowest recent requests per service', () => {
  test("lists the bridge's answer per service with each request's mode and links", async () => {
    const backend = fakeBackend({ [ROUTE]: { status: 200, data: slowest } });
    render(<SlowRequests settings={SETTINGS} now={NOW} />);
    const sections = await screen.findAllByTestId(testIds.requests.service);
    expect(sections.map((s) => within(s).getByRole('heading').textContent)).toEqual(
      slowest.services.map((s) => s.service)
    );
    // through the plugin's proxy route, with the window and the per-service count
    expect(backend.requests).toHaveLength(1);
    expect(backend.requests[0].url).toBe(
      '/api/plugin-proxy/profile-bridge-app/api/v1/requests/slowest?since=1h&per_service=10'
    );
    const rows = screen.getAllByTestId(testIds.requests.row);
    const requests = slowest.services.flatMap((s) => s.requests);
    expect(rows).toHaveLength(requests.length);
    requests.forEach((req, i) => {
      const row = rows[i];
      expect(within(row).getByText(req.duration)).toBeInTheDocument();
      const badge = within(row).getByTestId(testIds.requests.badge);
      expect(badge).toHaveTextContent(req.resolution!.mode);
      expect(badge).toHaveAttribute('title', req.resolution!.reason);
      const span = within(row).getByRole('link', { name: new RegExp(req.name.replace(/[/]/g, '\\/')) });
      expect(span).toHaveAttribute('href', `http://localhost:4041/spans/${req.traceId}/${req.spanId}`);
      expect(within(row).getByRole('link', { name: /request/ })).toHaveAttribute(
        'href',
        `http://localhost:4041/spans/${req.traceId}/${req.spanId}?scope=request`
      );
      const explore = new URL(within(row).getByRole('link', { name: 'Explore' }).getAttribute('href')!, 'http://g');
      const panes = JSON.parse(explore.searchParams.get('panes')!);
      expect(panes.profile.queries[0].spanSelector).toEqual([`${req.spanId}:${req.traceId}`]);
      expect(panes.profile.queries[0].datasource.uid).toBe('prof');
      expect(panes.profile.queries[0].labelSelector).toContain(`service_name="${req.service}"`);
    });
    expect(screen.getAllByText('linked').length).toBeGreaterThan(0);
  });

  test('another window asks again', async () => {
    const backend = fakeBackend({ [ROUTE]: { status: 200, data: slowest } });
    render(<SlowRequests settings={SETTINGS} now={NOW} />);
    await screen.findAllByTestId(testIds.requests.service);
    fireEvent.click(screen.getByRole('radio', { name: '15m' }));
    await waitFor(() => expect(backend.requests).toHaveLength(2));
    expect(backend.requests[1].url).toContain('since=15m');
  });

  test("the bridge's error is shown, not a blank page", async () => {
    fakeBackend({
      [ROUTE]: { status: 503, data: { error: { code: 'unavailable', message: 'tempo: connection refused' } } },
    });
    render(<SlowRequests settings={SETTINGS} now={NOW} />);
    expect(await screen.findByText(/HTTP 503: tempo: connection refused/)).toBeInTheDocument();
  });

  test('a request whose resolution failed is marked, the others still listed', async () => {
    const broken = JSON.parse(JSON.stringify(slowest));
    broken.services[0].requests[0].resolution = null;
    broken.services[0].requests[0].error = { code: 'unavailable', message: 'pyroscope: ingesters are down' };
    fakeBackend({ [ROUTE]: { status: 200, data: broken } });
    render(<SlowRequests settings={SETTINGS} now={NOW} />);
    const rows = await screen.findAllByTestId(testIds.requests.row);
    const badge = within(rows[0]).getByTestId(testIds.requests.badge);
    expect(badge).toHaveTextContent('error');
    expect(badge).toHaveAttribute('title', 'pyroscope: ingesters are down');
  });

  test('without settings it says what to configure', async () => {
    fakeBackend({});
    render(<SlowRequests settings={{}} now={NOW} />);
    expect(await screen.findByText('The bridge is not configured')).toBeInTheDocument();
    expect(await screen.findByText(/HTTP 404: plugin route match not found/)).toBeInTheDocument();
  });
});
