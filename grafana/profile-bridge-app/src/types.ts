import pluginJson from './plugin.json';

export const PLUGIN_ID = pluginJson.id;
export const PLUGIN_BASE_URL = `/a/${pluginJson.id}`;
/** Where the browser reaches the plugin's proxy routes (plugin.json `routes`); Grafana's server forwards them. */
export const PROXY_BASE_URL = `/api/plugin-proxy/${pluginJson.id}`;

export const DEFAULT_PROFILE_TYPE = 'process_cpu:cpu:nanoseconds:cpu:nanoseconds';
export const DEFAULT_TRACES_UID = 'profile-bridge-tempo';
export const DEFAULT_PROFILES_UID = 'profile-bridge-pyroscope';
export const DEFAULT_TAGS: Tag[] = [
  { key: 'service.name', value: 'service_name' },
  { key: 'service.namespace', value: 'service_namespace' },
];

/** A span attribute → profile label mapping, the shape of the Tempo data source's `tracesToProfiles.tags`. */
export type Tag = { key: string; value?: string };

/** The app's settings (`jsonData`), set on its config page or by provisioning (`plugins/profile-bridge-app.yaml`). */
export type AppSettings = {
  /** The bridge as the browser reaches it: links open its pages. */
  bridgeUrl?: string;
  /** The bridge as Grafana's server reaches it: the proxy routes forward there. */
  bridgeServerUrl?: string;
  /** The Tempo data source the app page's Explore links use (the trace view's own data source otherwise). */
  tracesUid?: string;
  /** The Profiles (grafana-pyroscope-datasource) data source of the Explore links. */
  profilesUid?: string;
  /** The profile type of the Explore links, e.g. process_cpu:cpu:nanoseconds:cpu:nanoseconds. */
  profileTypeId?: string;
  /** Resource attributes → profile labels of the Explore links' label selector. */
  tags?: Tag[];
};

/**
 * The context of `grafana/traceview/resource-attributes` (`PluginExtensionResourceAttributesContext` of
 * `@grafana/data`). `traceID` and `spanID` arrive from Grafana 12.4 on, `spanStartTime` (microseconds, the trace
 * view's unit) from 13.x; everything is optional here so an older Grafana's context is handled, not trusted.
 */
export type ResourceAttributesContext = {
  attributes?: Record<string, string[]>;
  spanAttributes?: Record<string, string[]>;
  timeRange?: { from: number; to: number };
  datasource?: { type?: string; uid?: string };
  traceID?: string;
  spanID?: string;
  spanStartTime?: number;
};

type TraceSpanLike = {
  spanID?: string;
  traceID?: string;
  depth?: number;
  startTime?: number;
  references?: Array<{ refType?: string; spanID?: string; traceID?: string }>;
};

/** The context of `grafana/traceview/header/actions`: the trace view's trace (times in microseconds) and its data
 * source. Only the fields this plugin reads. */
export type TraceHeaderContext = {
  traceID?: string;
  spans?: TraceSpanLike[];
  datasource?: { name?: string; type?: string; uid?: string };
};
