"""Apache Airflow provider for distributed training from a Polyaxon-style environment spec.

Kept free of Airflow imports: training images import ``airflow_distributed.tracking`` without Airflow.
"""

__version__ = "0.1.0"
