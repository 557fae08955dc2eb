"""The provider's retry policy, where DAGs name it: ``from airflow_distributed.retry_policy import
DistributedRetryPolicy`` (and its serialised ``__type``). Defined in ``airflow_features.retry_policy``; like it,
importing this module on Airflow < 3.3 raises ``ImportError``."""

from airflow_distributed.airflow_features.retry_policy import AT_ONCE, RULES, DistributedRetryPolicy

__all__ = ["AT_ONCE", "RULES", "DistributedRetryPolicy"]
