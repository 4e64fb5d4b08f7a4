"""Embedded services: a local PostgreSQL cluster and a local MLflow tracking server."""
