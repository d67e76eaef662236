import React, { Suspense, lazy } from 'react';
import { AppPlugin, type AppRootProps, PluginExtensionPoints } from '@grafana/data';
import { LoadingPlaceholder } from '@grafana/ui';
import type { AppConfigProps } from './components/AppConfig/AppConfig';
import {
  configureCompareWithUsual,
  configureHotFunctions,
  configureRelatedExplore,
  configureRelatedProfiles,
  configureRequestProfile,
} from './links';
import { AppSettings, PLUGIN_BASE_URL, ResourceAttributesContext, TraceHeaderContext } from './types';

const LazyApp = lazy(() => import('./components/App/App'));
const LazyAppConfig = lazy(() => import('./components/AppConfig/AppConfig'));

const App = (props: AppRootProps<AppSettings>) => (
  <Suspense fallback={<LoadingPlaceholder text="" />}>
    <LazyApp {...props} />
  </Suspense>
);

const AppConfig = (props: AppConfigProps) => (
  <Suspense fallback={<LoadingPlaceholder text="" />}>
    <LazyAppConfig {...props} />
  </Suspense>
);

/** The row of span details the span links sit beside (Grafana shows a link next to the attribute whose key equals
 * its category). */
export const SPAN_LINK_CATEGORY = 'service.name';

// Each link's title and targets are also declared in plugin.json `extensions.addedLinks`: Grafana refuses a link
// that is not. `path` is a placeholder inside the app (Grafana requires one at registration); configure() replaces
// it per span, or hides the link (returns undefined) when the context has no usable span.
export const plugin = new AppPlugin<AppSettings>()
  .setRootPage(App)
  .addConfigPage({
    title: 'Configuration',
    icon: 'cog',
    body: AppConfig,
    id: 'configuration',
  })
  .addLink<ResourceAttributesContext>({
    title: 'Related profiles',
    description:
      "Open the bridge's page of this span: its profile, labelled with how it was found, its request scope and downloads",
    targets: [PluginExtensionPoints.TraceViewResourceAttributes],
    category: SPAN_LINK_CATEGORY,
    icon: 'fire',
    path: `${PLUGIN_BASE_URL}/span`,
    configure: configureRelatedProfiles,
  })
  .addLink<ResourceAttributesContext>({
    title: 'Related profiles in Explore',
    description: "Open Explore split: this trace beside the span's profile query on the Profiles data source",
    targets: [PluginExtensionPoints.TraceViewResourceAttributes],
    category: SPAN_LINK_CATEGORY,
    icon: 'compass',
    path: `${PLUGIN_BASE_URL}/explore`,
    configure: configureRelatedExplore,
  })
  .addLink<ResourceAttributesContext>({
    title: 'Compare with usual',
    description:
      "Open the bridge's comparison of this span with its endpoint's usual requests: a diff flame graph and the most unusual functions",
    targets: [PluginExtensionPoints.TraceViewResourceAttributes],
    category: SPAN_LINK_CATEGORY,
    icon: 'exchange-alt',
    path: `${PLUGIN_BASE_URL}/span`,
    configure: configureCompareWithUsual,
  })
  .addLink<ResourceAttributesContext>({
    title: 'Hot functions and their requests',
    description:
      "Open the bridge's list of this service's hottest functions around the span; each opens the requests that burn it",
    targets: [PluginExtensionPoints.TraceViewResourceAttributes],
    category: SPAN_LINK_CATEGORY,
    icon: 'list-ul',
    path: `${PLUGIN_BASE_URL}/functions`,
    configure: configureHotFunctions,
  })
  .addLink<TraceHeaderContext>({
    title: 'Request profile',
    description:
      "Open the bridge's request-scope page of this trace's root span: the CPU the whole request cost, per service",
    targets: [PluginExtensionPoints.TraceViewHeaderActions],
    icon: 'fire',
    path: `${PLUGIN_BASE_URL}/span`,
    configure: configureRequestProfile,
  });
