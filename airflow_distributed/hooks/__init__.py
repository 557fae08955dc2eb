"""Hooks: the only modules that start processes or talk to the Kubernetes API."""
