"""Upstream test doubles: real aiohttp apps on 127.0.0.1 (port 0) that decode requests for real, answer from
fixture data and record what they were asked. They are test doubles, not Tempo or Pyroscope."""
