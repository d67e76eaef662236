"""Grafana provisioning for the bridge: ``render.py`` turns settings into data source and dashboard provider YAML
(jinja2 templates under ``templates/``) plus the dashboards (``dashboards/*.json``, their only copy);
``profile-bridge provision --out DIR`` writes them all."""
