import React from 'react';
import { MemoryRouter } from 'react-router-dom';
import { render, screen } from '@testing-library/react';
import { locationService } from '@grafana/runtime';
import {
  configureCompareWithUsual,
  configureHotFunctions,
  configureRelatedExplore,
  configureRelatedProfiles,
  configureRequestProfile,
} from '../links';
import { OpenExplore, OpenFunctions, OpenSpan } from './Open';

const TRACE = '9ec1b914dcf8fa8d54837b7c570b1af9';
const SPAN = '5a816dd003bf6b81';
const SETTINGS = { bridgeUrl: 'http://localhost:4041', profilesUid: 'prof' };

/** The app page a link's path opens (the part after `/a/<plugin id>`), rendered in a router. */
function openAt(path: string, page: React.ReactElement) {
  const inApp = path.replace('/a/profile-bridge-app/', '/');
  return render(<MemoryRouter initialEntries={[inApp]}>{page}</MemoryRouter>);
}

const context = {
  attributes: { 'service.name': ['shop-backend'] },
  timeRange: { from: 0, to: 1 },
  datasource: { type: 'tempo', uid: 'tempo-1' },
  traceID: TRACE,
  spanID: SPAN,
  spanStartTime: 1_795_945_303_639_345,
};

describe('the pages the trace view links open', () => {
  afterEach(() => jest.restoreAllMocks());

  test("Related profiles goes on to the bridge's span page", () => {
    const go = jest.fn();
    openAt(configureRelatedProfiles(context)!.path, <OpenSpan settings={SETTINGS} go={go} />);
    expect(go).toHaveBeenCalledWith(`http://localhost:4041/spans/${TRACE}/${SPAN}`);
    expect(screen.getByRole('link')).toHaveAttribute('href', `http://localhost:4041/spans/${TRACE}/${SPAN}`);
  });

  test("Request profile goes on to the bridge's request-scope page", () => {
    const go = jest.fn();
    const trace = { traceID: TRACE, datasource: { type: 'tempo' }, spans: [{ spanID: SPAN, references: [] }] };
    openAt(configureRequestProfile(trace)!.path, <OpenSpan settings={SETTINGS} go={go} />);
    expect(go).toHaveBeenCalledWith(`http://localhost:4041/spans/${TRACE}/${SPAN}?scope=request`);
  });

  test("Compare with usual goes on to the bridge's compare page", () => {
    const go = jest.fn();
    openAt(configureCompareWithUsual(context)!.path, <OpenSpan settings={SETTINGS} go={go} />);
    expect(go).toHaveBeenCalledWith(`http://localhost:4041/spans/${TRACE}/${SPAN}/compare`);
  });

  test("Hot functions and their requests goes on to the bridge's functions page of the span's service", () => {
    const go = jest.fn();
    openAt(configureHotFunctions(context)!.path, <OpenFunctions settings={SETTINGS} go={go} now={() => 0} />);
    const start = 1_795_945_303_639;
    expect(go).toHaveBeenCalledWith(
      `http://localhost:4041/functions/spans?service=shop-backend&from=${start - 1_800_000}&to=${start + 1_800_000}`
    );
  });

  test('the functions page without a service or a bridge URL says so and goes nowhere', () => {
    const go = jest.fn();
    openAt('/functions?from=1&to=2', <OpenFunctions settings={SETTINGS} go={go} />);
    expect(screen.getByText('No service to open')).toBeInTheDocument();
    openAt(configureHotFunctions(context)!.path, <OpenFunctions settings={{}} go={go} />);
    expect(screen.getByText('The bridge URL is not set')).toBeInTheDocument();
    expect(go).not.toHaveBeenCalled();
  });

  test('without a bridge URL it says where to set one, and goes nowhere', () => {
    const go = jest.fn();
    openAt(configureRelatedProfiles(context)!.path, <OpenSpan settings={{}} go={go} />);
    expect(go).not.toHaveBeenCalled();
    expect(screen.getByText('The bridge URL is not set')).toBeInTheDocument();
    expect(screen.getByRole('link', { name: 'configuration page' })).toHaveAttribute(
      'href',
      '/plugins/profile-bridge-app'
    );
  });

  test('a malformed span id goes nowhere', () => {
    const go = jest.fn();
    openAt(`/span?trace=${TRACE}&span=..%2F..%2Fadmin`, <OpenSpan settings={SETTINGS} go={go} />);
    expect(go).not.toHaveBeenCalled();
    expect(screen.getByText('No span to open')).toBeInTheDocument();
  });

  test('Related profiles in Explore replaces the page with Explore, split', () => {
    const replace = jest.spyOn(locationService, 'replace').mockImplementation(() => undefined);
    openAt(configureRelatedExplore(context)!.path, <OpenExplore settings={SETTINGS} now={() => 0} />);
    expect(replace).toHaveBeenCalledTimes(1);
    const url = new URL(replace.mock.calls[0][0] as string, 'http://grafana.invalid');
    expect(url.pathname).toBe('/explore');
    const panes = JSON.parse(url.searchParams.get('panes')!);
    expect(Object.keys(panes)).toEqual(['trace', 'profile']);
    expect(panes.trace.queries[0]).toMatchObject({ query: TRACE, datasource: { type: 'tempo', uid: 'tempo-1' } });
    expect(panes.profile.queries[0]).toMatchObject({
      datasource: { type: 'grafana-pyroscope-datasource', uid: 'prof' },
      labelSelector: '{service_name="shop-backend"}',
      spanSelector: [`${SPAN}:${TRACE}`],
    });
    expect(panes.profile.range).toEqual({
      from: String(1_795_945_303_639 - 60_000),
      to: String(1_795_945_303_639 + 60_000),
    });
  });
});
