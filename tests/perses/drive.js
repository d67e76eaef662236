// Drives Perses' Pyroscope client — @perses-dev/pyroscope-plugin 0.4.0 from npm, its own code — against a bridge,
// as Perses' profile panel and query editor do, and prints what the client returned as one JSON document.
//
// usage: node drive.js <data source URL, e.g. http://127.0.0.1:4041/pyroscope> <service> <start s> <end s>
//
// What runs is the plugin's: the data source's createClient (plugins/pyroscope-datasource.js), the query editor's
// calls (utils/use-query.js: searchProfileTypes, searchLabelNames, searchLabelValues, searchServices, each with the
// headers and body the editor's hooks pass) and the panel's getProfileData
// (plugins/pyroscope-profile-query/get-profile-data.js: GET /pyroscope/render, then its transform). The one module
// not loaded is the data source's settings editor, a React component the client does not call.
'use strict';

const path = require('path');

const plugin = path.dirname(require.resolve('@perses-dev/pyroscope-plugin/package.json'));
const editor = path.join(plugin, 'lib/cjs/plugins/PyroscopeDatasourceEditor.js');
require.cache[editor] = {
  id: editor,
  filename: editor,
  loaded: true,
  exports: { PyroscopeDatasourceEditor: function PyroscopeDatasourceEditor() {} },
};

const { PyroscopeDatasource } = require(path.join(plugin, 'lib/cjs/plugins/pyroscope-datasource.js'));
const { getProfileData } = require(path.join(plugin, 'lib/cjs/plugins/pyroscope-profile-query/get-profile-data.js'));

async function main() {
  const [url, service, startS, endS] = process.argv.slice(2);
  const client = PyroscopeDatasource.createClient({ directUrl: url }, {});
  const json = { 'content-type': 'application/json' };
  const context = {
    datasourceStore: { getDatasourceClient: async () => client },
    absoluteTimeRange: { start: new Date(Number(startS) * 1000), end: new Date(Number(endS) * 1000) },
  };
  const spec = { profileType: 'process_cpu:cpu:nanoseconds:cpu:nanoseconds', service };
  const out = {
    profileTypes: await client.searchProfileTypes({}, json, {}),
    labelNames: await client.searchLabelNames({}, json, {}),
    labelValues: await client.searchLabelValues({}, json, { name: 'span_name' }),
    services: await client.searchServices({}, json),
    profile: await getProfileData(spec, context),
    small: await getProfileData({ ...spec, maxNodes: 4 }, context),
    lastHour: await getProfileData(spec, { datasourceStore: context.datasourceStore }), // from=now-1h
  };
  let failure = null;
  try {
    await getProfileData({ ...spec, profileType: 'cpu' }, context);
  } catch (err) {
    failure = { name: err.name, message: err.message, status: err.status };
  }
  out.failure = failure;
  process.stdout.write(JSON.stringify(out));
}

main().catch((err) => {
  process.stderr.write(String(err && err.stack ? err.stack : err));
  process.exit(1);
});
