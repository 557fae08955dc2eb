"""Pure builders: a ``ClusterPlan`` turned into what a backend launches (process specs, Kubernetes objects).

- ``local``: one ``ProcessSpec`` per replica for the local backend.
- ``kubernetes``: the Service, Pods, ConfigMap, Secret and PodGroup of a job (``build_job_objects``), with
  ``kubernetes_resources`` (pod settings as client models), ``horovod_ssh`` (the SSH key pair and sshd of the
  launcher model), ``gang_scheduling`` (Volcano, scheduler-plugins, Kueue) and ``container_scripts`` (the
  readiness wait and output relay run with the image's Python).
- ``kubeflow``: the same plan as one Kubeflow resource (TFJob, PyTorchJob, MXJob, MPIJob), with
  ``kubeflow_status`` reading such a resource's state back.
"""
