/**
 * The bridge's API as the browser reaches it: through the plugin's proxy routes (plugin.json `routes`), which
 * Grafana's server forwards to the bridge URL in the app's settings (`bridgeServerUrl`). The browser never talks to
 * the bridge directly here.
 */
import { lastValueFrom } from 'rxjs';
import { getBackendSrv, FetchError, FetchResponse } from '@grafana/runtime';
import { PROXY_BASE_URL } from './types';

export type Mode = 'linked' | 'local-root' | 'time-window' | 'none';

export type SlowRequest = {
  traceId: string;
  spanId: string;
  name: string;
  service: string;
  startTimeUnixNano: string;
  durationNanos: string;
  duration: string;
  spansBelow: number;
  resource: Record<string, string>;
  links: { span: string; request: string };
  resolution: { mode: Mode; reason: string; total: number } | null;
  error?: { code: string; message: string };
};

export type SlowestAnswer = {
  mode: 'proxy' | 'standalone';
  since: string;
  sinceSeconds: number;
  profileType: string;
  traces: number;
  services: Array<{ service: string; requests: SlowRequest[] }>;
};

export type Upstream = { status: 'ready' | 'unavailable'; detail?: string; code?: string; message?: string };

export type Readiness = {
  status: 'ready' | 'unavailable';
  mode: string;
  upstreams: Record<string, Upstream>;
};

/** One line saying why a call failed: the bridge's own error message when it sent one (Connect error JSON), else
 * Grafana's (e.g. "plugin route match not found"), else the HTTP status. */
export function errorText(err: unknown): string {
  const e = err as Partial<FetchError<{ error?: { message?: string }; message?: string }>>;
  const data = e?.data;
  const message = data?.error?.message || data?.message || e?.statusText || (err instanceof Error ? err.message : '');
  return e?.status ? `HTTP ${e.status}: ${message || 'request failed'}` : message || 'request failed';
}

async function get<T>(path: string, params: Record<string, string>): Promise<FetchResponse<T>> {
  const query = new URLSearchParams(params).toString();
  return lastValueFrom(
    getBackendSrv().fetch<T>({
      url: `${PROXY_BASE_URL}/${path}${query ? `?${query}` : ''}`,
      method: 'GET',
      showErrorAlert: false,
      showSuccessAlert: false,
    })
  );
}

/** `GET /api/v1/requests/slowest` through the proxy route. */
export async function fetchSlowest(since: string, perService: number): Promise<SlowestAnswer> {
  const resp = await get<SlowestAnswer>('api/v1/requests/slowest', { since, per_service: String(perService) });
  return resp.data;
}

/** `GET /readyz` through the proxy route. A 503 is still an answer (some upstream is down): its body is returned. */
export async function fetchReadiness(): Promise<Readiness> {
  try {
    return (await get<Readiness>('readyz', {})).data;
  } catch (err) {
    const data = (err as Partial<FetchError<Readiness>>)?.data;
    if (data && typeof data === 'object' && 'upstreams' in data) {
      return data;
    }
    throw err;
  }
}
