import { PluginExtensionPoints } from '@grafana/data';
import pluginJson from './plugin.json';
import { plugin, SPAN_LINK_CATEGORY } from './module';

describe('the links the app registers', () => {
  const links = plugin.addedLinkConfigs;

  test('are the five links plugin.json declares, with the same titles, descriptions and targets', () => {
    // Grafana refuses a link whose title and targets plugin.json does not declare
    const declared = pluginJson.extensions.addedLinks.map((l) => ({ ...l, targets: [...l.targets].sort() }));
    const registered = links.map((l) => ({
      title: l.title,
      description: l.description,
      targets: [...(Array.isArray(l.targets) ? l.targets : [l.targets])].sort(),
    }));
    expect(registered).toEqual(declared);
  });

  test('target the trace view: span details beside service.name, and the trace header', () => {
    const byTitle = Object.fromEntries(links.map((l) => [l.title, l]));
    for (const title of [
      'Related profiles',
      'Related profiles in Explore',
      'Compare with usual',
      'Hot functions and their requests',
    ]) {
      expect(byTitle[title].targets).toEqual([PluginExtensionPoints.TraceViewResourceAttributes]);
      expect(byTitle[title].category).toBe(SPAN_LINK_CATEGORY);
    }
    expect(byTitle['Request profile'].targets).toEqual([PluginExtensionPoints.TraceViewHeaderActions]);
    expect(PluginExtensionPoints.TraceViewResourceAttributes).toBe('grafana/traceview/resource-attributes');
    expect(PluginExtensionPoints.TraceViewHeaderActions).toBe('grafana/traceview/header/actions');
  });

  test('have paths inside the app (Grafana accepts no other) and a configure() that hides them without a span', () => {
    for (const link of links) {
      expect(link.path?.startsWith(`/a/${pluginJson.id}/`)).toBe(true);
      expect(link.configure?.(undefined)).toBeUndefined();
    }
  });

  test('plugin.json: an app without a backend, preloaded, for Grafana 12.4 or later', () => {
    expect(pluginJson.type).toBe('app');
    expect(pluginJson.backend).toBe(false);
    expect(pluginJson.preload).toBe(true);
    expect(pluginJson.dependencies.grafanaDependency).toBe('>=12.4.0');
    expect(pluginJson.routes.map((r) => r.path).sort()).toEqual(['api/v1/requests/slowest', 'readyz']);
    for (const route of pluginJson.routes) {
      expect(route.url).toBe(`{{ .JsonData.bridgeServerUrl }}/${route.path}`);
      expect(route.method).toBe('GET');
    }
  });
});
