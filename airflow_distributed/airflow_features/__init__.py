"""What the training task hands to Airflow's own features, beside the operator that uses them:

- ``links``: the operator's extra links (the job view, URL templates, the MLflow run), registered in
  ``get_provider_info``;
- ``lineage``: OpenLineage inputs, outputs and run facets (the optional OpenLineage provider);
- ``assets``: the asset events a finished job emits (the model, its alias and extras);
- ``retry_policy``: the retry policy (Airflow >= 3.3); users name it as ``airflow_distributed.retry_policy``.

This ``__init__`` imports nothing: ``retry_policy`` cannot be imported on Airflow < 3.3 and ``lineage`` needs the
optional OpenLineage provider, so each module is imported by name where it is needed.
"""
