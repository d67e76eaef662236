import React, { ChangeEvent, FormEvent, useState } from 'react';
import { lastValueFrom } from 'rxjs';
import { css } from '@emotion/css';
import { AppPluginMeta, GrafanaTheme2, PluginConfigPageProps, PluginMeta } from '@grafana/data';
import { getBackendSrv } from '@grafana/runtime';
import { Alert, Button, Field, FieldSet, Input, Stack, useStyles2 } from '@grafana/ui';
import { errorText, fetchReadiness, Readiness } from '../../api';
import { isHttpUrl, withDefaults } from '../../links';
import { testIds } from '../../testIds';
import { AppSettings } from '../../types';

export interface AppConfigProps extends PluginConfigPageProps<AppPluginMeta<AppSettings>> {}

type Form = {
  bridgeUrl: string;
  bridgeServerUrl: string;
  tracesUid: string;
  profilesUid: string;
  profileTypeId: string;
};

type TestState = { running: true } | { running: false; readiness?: Readiness; error?: string };

/** Saves the settings (POST /api/plugins/<id>/settings); Grafana applies them to the app on the next page load. */
export type Saver = (pluginId: string, data: Partial<PluginMeta<AppSettings>>) => Promise<unknown>;

const saveSettings: Saver = async (pluginId, data) => {
  await lastValueFrom(getBackendSrv().fetch({ url: `/api/plugins/${pluginId}/settings`, method: 'POST', data }));
  window.location.reload();
};

function urlError(value: string, required: boolean): string | undefined {
  if (!value) {
    return required ? 'Required' : undefined;
  }
  return isHttpUrl(value) ? undefined : 'An http:// or https:// URL';
}

const AppConfig = ({ plugin, save = saveSettings }: AppConfigProps & { save?: Saver }) => {
  const styles = useStyles2(getStyles);
  const { enabled, pinned, jsonData } = plugin.meta;
  const current = withDefaults(jsonData);
  const [form, setForm] = useState<Form>({
    bridgeUrl: current.bridgeUrl,
    bridgeServerUrl: current.bridgeServerUrl,
    tracesUid: current.tracesUid,
    profilesUid: current.profilesUid,
    profileTypeId: current.profileTypeId,
  });
  const [test, setTest] = useState<TestState | undefined>();
  const [saveError, setSaveError] = useState<string | undefined>();

  const errors = {
    bridgeUrl: urlError(form.bridgeUrl, true),
    bridgeServerUrl: urlError(form.bridgeServerUrl, true),
  };
  const invalid = Boolean(errors.bridgeUrl || errors.bridgeServerUrl);

  const onChange = (event: ChangeEvent<HTMLInputElement>) =>
    setForm({ ...form, [event.target.name]: event.target.value.trim() });

  const onSubmit = async (event: FormEvent) => {
    event.preventDefault();
    if (invalid) {
      return;
    }
    try {
      await save(plugin.meta.id, {
        enabled: true,
        pinned: pinned ?? true,
        jsonData: { ...(jsonData ?? {}), ...form },
      });
    } catch (err) {
      setSaveError(errorText(err));
    }
  };

  const onTest = async () => {
    setTest({ running: true });
    try {
      setTest({ running: false, readiness: await fetchReadiness() });
    } catch (err) {
      setTest({ running: false, error: errorText(err) });
    }
  };

  const field = (name: keyof Form, label: string, description: string, placeholder: string) => (
    <Field
      label={label}
      description={description}
      invalid={Boolean(errors[name as keyof typeof errors])}
      error={errors[name as keyof typeof errors]}
    >
      <Input
        width={60}
        id={`config-${name}`}
        name={name}
        data-testid={testIds.appConfig[name]}
        value={form[name]}
        placeholder={placeholder}
        onChange={onChange}
      />
    </Field>
  );

  return (
    <form onSubmit={onSubmit} data-testid={testIds.appConfig.form}>
      <FieldSet label="Bridge">
        {!enabled && <Alert severity="info" title="Saving enables the app and its links in the trace view" />}
        {field(
          'bridgeUrl',
          'Bridge URL (browser)',
          "The bridge as your browser reaches it: the trace view's links open its span pages there",
          'http://localhost:4041'
        )}
        {field(
          'bridgeServerUrl',
          'Bridge URL (Grafana server)',
          "The bridge as Grafana's server reaches it: the app page and the test below go through Grafana to it",
          'http://bridge:4041'
        )}
      </FieldSet>
      <FieldSet label="Explore links">
        {field(
          'tracesUid',
          'Tempo data source uid',
          'The trace pane of the app page’s Explore links',
          'profile-bridge-tempo'
        )}
        {field(
          'profilesUid',
          'Profiles data source uid',
          'A grafana-pyroscope-datasource, e.g. the bridge’s',
          'profile-bridge-pyroscope'
        )}
        {field(
          'profileTypeId',
          'Profile type',
          'The profile type of the span’s query',
          'process_cpu:cpu:nanoseconds:cpu:nanoseconds'
        )}
      </FieldSet>
      <Stack gap={2}>
        <Button type="submit" data-testid={testIds.appConfig.save} disabled={invalid}>
          Save settings
        </Button>
        <Button
          type="button"
          variant="secondary"
          data-testid={testIds.appConfig.test}
          onClick={onTest}
          disabled={test?.running}
        >
          Test
        </Button>
      </Stack>
      {saveError && (
        <Alert severity="error" title="Could not save the settings">
          {saveError}
        </Alert>
      )}
      <div className={styles.result} data-testid={testIds.appConfig.result}>
        {test?.running && 'Asking the bridge’s /readyz…'}
        {test && !test.running && test.error && (
          <Alert severity="error" title="The bridge did not answer">
            {test.error}. The test goes through Grafana to the saved server URL: save first.
          </Alert>
        )}
        {test && !test.running && test.readiness && <ReadinessView readiness={test.readiness} />}
      </div>
    </form>
  );
};

function ReadinessView({ readiness }: { readiness: Readiness }) {
  const ok = readiness.status === 'ready';
  return (
    <Alert
      severity={ok ? 'success' : 'error'}
      title={ok ? `The bridge is ready (${readiness.mode} mode)` : `The bridge is not ready (${readiness.mode} mode)`}
    >
      <ul>
        {Object.entries(readiness.upstreams).map(([name, up]) => (
          <li key={name}>
            <strong>{name}</strong>: {up.status}
            {up.detail ? ` — ${up.detail}` : ''}
            {up.message ? ` — ${up.code ? `${up.code}: ` : ''}${up.message}` : ''}
          </li>
        ))}
      </ul>
    </Alert>
  );
}

export default AppConfig;

const getStyles = (theme: GrafanaTheme2) => ({
  result: css({ marginTop: theme.spacing(2) }),
});
