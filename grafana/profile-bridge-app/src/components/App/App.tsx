import React from 'react';
import { Route, Routes } from 'react-router-dom';
import { AppRootProps } from '@grafana/data';
import { AppSettings } from '../../types';
import { OpenExplore, OpenFunctions, OpenSpan } from '../../pages/Open';
import { SlowRequests } from '../../pages/SlowRequests';

/** The app's pages: `span`, `functions` and `explore` are where the trace view's links land (they go on to the
 * bridge's span, compare and functions pages, and to Explore); everything else is the list of slow requests. */
function App(props: AppRootProps<AppSettings>) {
  const settings = props.meta.jsonData;
  return (
    <Routes>
      <Route path="span" element={<OpenSpan settings={settings} />} />
      <Route path="explore" element={<OpenExplore settings={settings} />} />
      <Route path="functions" element={<OpenFunctions settings={settings} />} />
      <Route path="*" element={<SlowRequests settings={settings} />} />
    </Routes>
  );
}

export default App;
