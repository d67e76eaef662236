export const testIds = {
  appConfig: {
    form: 'data-testid pb-config-form',
    bridgeUrl: 'data-testid pb-config-bridge-url',
    bridgeServerUrl: 'data-testid pb-config-bridge-server-url',
    tracesUid: 'data-testid pb-config-traces-uid',
    profilesUid: 'data-testid pb-config-profiles-uid',
    profileTypeId: 'data-testid pb-config-profile-type',
    save: 'data-testid pb-config-save',
    test: 'data-testid pb-config-test',
    result: 'data-testid pb-config-test-result',
  },
  requests: {
    container: 'data-testid pb-requests',
    service: 'data-testid pb-requests-service',
    row: 'data-testid pb-requests-row',
    badge: 'data-testid pb-requests-badge',
  },
  open: {
    container: 'data-testid pb-open',
  },
};
