import React from 'react';
import { Route, Routes } from 'react-router-dom';
import { AppRootProps } from '@grafana/data';
import { AppSettings } from '../../types';
import { OpenExplore, OpenSpan } from '../../pages/Open';
import { SlowRequests } from '../../pages/SlowRequests';

/** The app's pages: `span` and `explore` are where the trace view's links land (they go on to the bridge's span page
 * and to Explore); everything else is the list of slow requests. */
function App(props: AppRootProps<AppSettings>) {
  const settings = props.meta.jsonData;
  return (
    <Routes>
      <Route path="span" element={<OpenSpan settings={settings} />} />
      <Route path="explore" element={<OpenExplore settings={settings} />} />
      <Route path="*" element={<SlowRequests settings={settings} />} />
    </Routes>
  );
}

export default App;
