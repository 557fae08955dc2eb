"""Deterministic, DNS-safe names for jobs and replicas (see CONTRACT.md, "Names and addresses")."""

from __future__ import annotations

import hashlib
import re

JOB_NAME_MAX = 40
_HASH_LEN = 8
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
#: What a DNS-1123 label (a namespace's name) may be, for messages.
DNS_LABEL_RULE = ("a DNS-1123 label: lower-case alphanumeric characters or '-', starting and ending with an "
                  "alphanumeric character, at most 63 characters (e.g. 'ml-training')")


def job_name(dag_id: str, task_id: str, run_id: str, map_index: int = -1) -> str:
    """``<task>-<hash>``: the same task instance always gets the same name, two runs never share one.

    The result is a DNS-1035 label (it names the headless Service too) of at most 40 characters,
    so ``<job>-<role>-<index>`` stays under Kubernetes' 63-character limit.
    """
    key = "\x00".join([dag_id, task_id, run_id, str(map_index)])
    digest = hashlib.sha256(key.encode()).hexdigest()[:_HASH_LEN]
    stem = dns_label(task_id.rsplit(".", 1)[-1], JOB_NAME_MAX - _HASH_LEN - 1) or "job"
    if not stem[0].isalpha():
        stem = ("j" + stem)[: JOB_NAME_MAX - _HASH_LEN - 1].rstrip("-")
    return f"{stem}-{digest}"


def replica_name(job: str, role: str, index: int) -> str:
    return f"{job}-{role}-{index}"


def dns_label(text: str, max_length: int = 63) -> str:
    """Lower-case ``[a-z0-9-]`` with no leading/trailing dash, cut to ``max_length``."""
    label = re.sub(r"[^a-z0-9-]+", "-", text.lower())
    label = re.sub(r"-{2,}", "-", label).strip("-")
    return label[:max_length].rstrip("-")


def is_dns_label(text: object) -> bool:
    """Whether ``text`` is a DNS-1123 label, as the API server checks a namespace's name."""
    return isinstance(text, str) and len(text) <= 63 and _DNS_LABEL.fullmatch(text) is not None


def label_value(text: str) -> str:
    """A Kubernetes label value: at most 63 of ``[A-Za-z0-9_.-]``, alphanumeric at both ends."""
    value = re.sub(r"[^A-Za-z0-9_.-]+", "_", text)[:63]
    return value.strip("_.-")
