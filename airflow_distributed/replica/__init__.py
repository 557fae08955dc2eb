"""What runs inside a job's replicas, not in Airflow: the helpers behind ``airflow_distributed.tracking``, and the
Ray driver.

Training code imports ``airflow_distributed.tracking`` (the public module); it is built from these:

- ``info``: where this replica stands in its job (role, index, the cluster, the try), from the contract's variables;
- ``checkpoints``: a job's checkpoints saved and read back, each job's files listed; ``atomic_file`` writes them
  (and the output document) so that no reader sees half a file;
- ``live_report``: the live record a master prints, and how its readers (job view, hang watchdog, task log) find it;
- ``trainer_status``: progress posted to Kubeflow Trainer's status endpoint;
- ``stack_dump``: the Python stacks printed on the hang watchdog's signal.

Those import the standard library only (and ``contract``, ``strict_json``): training images have no Airflow.
``ray_driver`` is a program, the entrypoint of a ``backend="ray"`` job's Ray Job (``python -m
airflow_distributed.replica.ray_driver``), run in the Ray cluster with Ray and this package, not Airflow; nothing in
the package imports it. This ``__init__`` imports nothing, so each of them loads only what it names.
"""
