"""The Airflow UI plugin of the provider: a job view per task instance of ``DistributedTrainingOperator``.

- ``plugin``: the ``AirflowPlugin`` registered through the ``airflow.plugins`` entry point
- ``app``: the FastAPI app mounted in the API server (JSON record and HTML view, behind Airflow's auth)
- ``job_state``: where a job's state is read from (the recorded ``job`` XCom, then the live sources)
- ``live_kubernetes``: a running Kubernetes job's pods, read where the DAG says it runs, with its team's connection
- ``page``, ``charts``: the server-rendered HTML and its SVG line charts (pure)
- ``urls``: the paths of the view, shared with the operator links (pure, no Airflow import)

This package's ``__init__`` imports nothing: the operator links import ``urls`` on every DAG parse. Loading the
plugin imports ``plugin`` and ``urls`` only; ``plugin.JobViewApp`` imports ``app`` (and with it the other
modules) when the API server serves the view's first request.
"""
