import React from 'react';
import { fireEvent, render, screen, waitFor, within } from '@testing-library/react';
import { PluginType } from '@grafana/data';
import type { Readiness } from '../../api';
import { bridgeAnswer, fakeBackend } from '../../testing/fakeBackend';
import { testIds } from '../../testIds';
import AppConfig, { AppConfigProps } from './AppConfig';

const readyz = bridgeAnswer<Readiness>('readyz.json');
const ROUTE = 'GET /api/plugin-proxy/profile-bridge-app/readyz';

function props(jsonData: Record<string, unknown>): AppConfigProps {
  return {
    plugin: {
      meta: { id: 'profile-bridge-app', name: 'profile-bridge', type: PluginType.app, enabled: true, jsonData },
    },
    query: {},
  } as unknown as AppConfigProps;
}

const PROVISIONED = { bridgeUrl: 'http://localhost:4041', bridgeServerUrl: 'http://bridge:4041' };

describe('the config page', () => {
  test('shows the settings with their defaults and saves them', async () => {
    const save = jest.fn().mockResolvedValue(undefined);
    render(<AppConfig {...props(PROVISIONED)} save={save} />);
    expect(screen.getByTestId(testIds.appConfig.bridgeUrl)).toHaveValue('http://localhost:4041');
    expect(screen.getByTestId(testIds.appConfig.bridgeServerUrl)).toHaveValue('http://bridge:4041');
    expect(screen.getByTestId(testIds.appConfig.profilesUid)).toHaveValue('profile-bridge-pyroscope');
    expect(screen.getByTestId(testIds.appConfig.profileTypeId)).toHaveValue(
      'process_cpu:cpu:nanoseconds:cpu:nanoseconds'
    );
    fireEvent.change(screen.getByTestId(testIds.appConfig.bridgeUrl), {
      target: { name: 'bridgeUrl', value: ' https://bridge.example.com ' },
    });
    fireEvent.click(screen.getByTestId(testIds.appConfig.save));
    await waitFor(() => expect(save).toHaveBeenCalledTimes(1));
    expect(save.mock.calls[0][0]).toBe('profile-bridge-app');
    expect(save.mock.calls[0][1]).toMatchObject({
      enabled: true,
      jsonData: { bridgeUrl: 'https://bridge.example.com', bridgeServerUrl: 'http://bridge:4041' },
    });
  });

  test('a URL that is not http(s) is refused before saving', () => {
    const save = jest.fn();
    render(<AppConfig {...props({ ...PROVISIONED, bridgeUrl: 'javascript:alert(1)' })} save={save} />);
    expect(screen.getByText('An http:// or https:// URL')).toBeInTheDocument();
    expect(screen.getByTestId(testIds.appConfig.save)).toBeDisabled();
  });

  test("Test calls the bridge's /readyz through the route and shows each upstream", async () => {
    const backend = fakeBackend({ [ROUTE]: { status: 200, data: readyz } });
    render(<AppConfig {...props(PROVISIONED)} save={jest.fn()} />);
    fireEvent.click(screen.getByTestId(testIds.appConfig.test));
    const result = screen.getByTestId(testIds.appConfig.result);
    expect(await within(result).findByText('The bridge is ready (standalone mode)')).toBeInTheDocument();
    expect(backend.requests.map((r) => r.url)).toEqual(['/api/plugin-proxy/profile-bridge-app/readyz']);
    for (const name of Object.keys(readyz.upstreams)) {
      expect(within(result).getByText(name)).toBeInTheDocument();
    }
  });

  test('an unavailable upstream is named with its error', async () => {
    const down = {
      status: 'unavailable',
      mode: 'proxy',
      upstreams: {
        tempo: { status: 'ready', detail: 'http://tempo:3200' },
        pyroscope: { status: 'unavailable', code: 'unavailable', message: 'pyroscope: connection refused' },
      },
    };
    fakeBackend({ [ROUTE]: { status: 503, data: down } });
    render(<AppConfig {...props(PROVISIONED)} save={jest.fn()} />);
    fireEvent.click(screen.getByTestId(testIds.appConfig.test));
    const result = screen.getByTestId(testIds.appConfig.result);
    expect(await within(result).findByText('The bridge is not ready (proxy mode)')).toBeInTheDocument();
    expect(within(result).getByText(/unavailable: pyroscope: connection refused/)).toBeInTheDocument();
  });

  test('a route that does not answer says so', async () => {
    fakeBackend({});
    render(<AppConfig {...props({})} save={jest.fn()} />);
    fireEvent.click(screen.getByTestId(testIds.appConfig.test));
    expect(await screen.findByText(/HTTP 404: plugin route match not found/)).toBeInTheDocument();
  });
});
