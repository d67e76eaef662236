import React from 'react';
import { css } from '@emotion/css';
import { GrafanaTheme2 } from '@grafana/data';
import { useStyles2 } from '@grafana/ui';

const getStyles = (theme: GrafanaTheme2) => ({
  link: css({ color: theme.colors.text.link, '&:hover': { textDecoration: 'underline' } }),
});

/** A plain link in Grafana's link colour; `external` opens a new tab (the bridge's pages live outside Grafana). */
export function Link({ href, external, children }: { href: string; external?: boolean; children: React.ReactNode }) {
  const styles = useStyles2(getStyles);
  return external ? (
    <a href={href} target="_blank" rel="noopener noreferrer" className={styles.link}>
      {children}
    </a>
  ) : (
    <a href={href} className={styles.link}>
      {children}
    </a>
  );
}
