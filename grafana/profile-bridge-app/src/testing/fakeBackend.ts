/**
 * A stand-in for Grafana's backend service in jsdom: answers the plugin's proxy routes
 * (`/api/plugin-proxy/profile-bridge-app/…`) from `routes`, the way Grafana's `fetch` does (an observable of the
 * response; a non-2xx status as an error carrying `status` and `data`), and records what was asked. The bodies are
 * the bridge's own answers (`tests/fixtures/*.json`, rewritten by the Python suite's `--update-golden`).
 */
import fs from 'fs';
import path from 'path';
import { Observable, of, throwError } from 'rxjs';
import { BackendSrv, BackendSrvRequest, FetchResponse, setBackendSrv } from '@grafana/runtime';

export type Route = { status: number; data: unknown };

export type FakeBackend = { requests: BackendSrvRequest[] };

export function fakeBackend(routes: Record<string, Route>): FakeBackend {
  const requests: BackendSrvRequest[] = [];
  const fetch = <T>(options: BackendSrvRequest): Observable<FetchResponse<T>> => {
    requests.push(options);
    const path = options.url.split('?')[0];
    const route = routes[`${options.method ?? 'GET'} ${path}`];
    if (!route) {
      return throwError(() => ({
        status: 404,
        statusText: 'Not Found',
        data: { message: 'plugin route match not found' },
      }));
    }
    const response = {
      data: route.data as T,
      status: route.status,
      statusText: route.status < 300 ? 'OK' : 'Error',
      ok: route.status < 300,
      headers: new Headers(),
      redirected: false,
      type: 'basic',
      url: options.url,
      config: options,
    } as FetchResponse<T>;
    return route.status < 300 ? of(response) : throwError(() => response);
  };
  setBackendSrv({ fetch } as unknown as BackendSrv);
  return { requests };
}

/** One of the bridge's recorded answers under `tests/fixtures/` (outside `src/`, so the build does not ship them). */
export function bridgeAnswer<T = any>(name: 'slowest.json' | 'readyz.json'): T {
  return JSON.parse(fs.readFileSync(path.join(__dirname, '..', '..', 'tests', 'fixtures', name), 'utf-8'));
}
