// force timezone to UTC to allow tests to work regardless of local timezone
// generally used by snapshots, but can affect specific tests
process.env.TZ = 'UTC';

const base = require('./.config/jest.config');

// The scaffold's swc transform, applied to .mjs too: d3-color (pulled in by @grafana/ui) ships ES modules as .mjs.
const swc = Object.values(base.transform)[0];

module.exports = {
  ...base,
  transform: { ...base.transform, '^.+\\.mjs$': swc },
};
