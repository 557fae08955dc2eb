"""MXNet ps-lite: a scheduler (the master), servers (the spec's ``ps``) and workers, set up by ``DMLC_*``."""

from __future__ import annotations

from airflow_distributed.frameworks.base import Framework, Role


class MXNet(Framework):
    name = "mxnet"
    roles = (Role("scheduler", None), Role("server", "ps"), Role("worker", "worker"))
    default_port = 9091
    no_trainer_runtime = "MXNet has no Kubeflow Trainer v2 runtime"

    def replica_env(self, replica, plan):
        scheduler = plan.master
        env = {
            "DMLC_ROLE": replica.role,
            "DMLC_PS_ROOT_URI": scheduler.host,
            "DMLC_PS_ROOT_PORT": str(scheduler.port),
            "DMLC_NUM_SERVER": str(len(plan.cluster.get("server", []))),
            "DMLC_NUM_WORKER": str(len(plan.cluster.get("worker", []))),
        }
        if replica.role == "server":
            env["DMLC_SERVER_ID"] = str(replica.index)
        elif replica.role == "worker":
            env["DMLC_WORKER_ID"] = str(replica.index)
        if plan.launch.pods:
            env["DMLC_USE_KUBERNETES"] = "1"
        else:
            # ps-lite otherwise binds the first non-loopback interface it finds; these replicas talk over loopback.
            env["DMLC_NODE_HOST"] = replica.host
            env["DMLC_INTERFACE"] = "lo"
        return env
