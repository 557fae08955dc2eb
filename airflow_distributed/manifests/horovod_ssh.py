"""SSH for the MPI launcher model (Horovod) on Kubernetes: the job's key pair, its Secret, the mount, and sshd.

The launcher's ``horovodrun`` starts the ranks of every other replica over SSH, so each job gets its own
ed25519 key pair, shared by nothing else: the public key is every replica's ``authorized_keys``, the private
key is mounted on the launcher only. Standby replicas run sshd in the foreground as their main process.

Needs in the image: ``openssh-server`` (``/usr/sbin/sshd``, ``ssh-keygen``) and ``openssh-client``, and root
for sshd; ``/etc/ssh`` writable the first time, for the host keys.

Everything here is pure except ``generate_ssh_key_pair``, which draws random numbers and stays out of the
manifest builders (they take the key pair as an argument).
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from dataclasses import dataclass

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from kubernetes import client

from airflow_distributed.frameworks.horovod import SSH_DIR, SSH_PORT
from airflow_distributed.manifests.kubernetes_resources import model

PRIVATE_KEY = "id_ed25519"  # one of ssh's default identity files, so no -i is needed
PUBLIC_KEY = "id_ed25519.pub"
AUTHORIZED_KEYS = "authorized_keys"
CLIENT_CONFIG = "config"
# ssh refuses a private key (and sshd an authorized_keys) that others can read.
KEY_FILE_MODE = 0o600
VOLUME_NAME = "ssh"

# The hosts of a new job are never known beforehand and the key pair is the job's own, so there is nothing
# for host-key checking to protect; and /root/.ssh is a read-only Secret mount, where known_hosts cannot be written.
SSH_CLIENT_CONFIG = """\
Host *
    StrictHostKeyChecking no
    UserKnownHostsFile /dev/null
    LogLevel ERROR
"""

# StrictModes=no: the kubelet creates a Secret volume's directory world-writable, which sshd's check of
# ~/.ssh rejects, although the key files in it are 0600. ssh-keygen -A creates host keys only where the image has none.
SSHD_SCRIPT = (
    "mkdir -p /run/sshd && ssh-keygen -A && "
    f"exec /usr/sbin/sshd -D -e -p {shlex.quote(str(SSH_PORT))} -o StrictModes=no "
    "-o PasswordAuthentication=no -o PermitRootLogin=prohibit-password"
)


@dataclass(frozen=True)
class SshKeyPair:
    """An OpenSSH private key (PEM text) and its public key line (``ssh-ed25519 AAAA... comment``)."""

    private_key: str
    public_key: str

    def __repr__(self) -> str:  # keep the private key out of logs and test reports
        return f"SshKeyPair(public_key={self.public_key!r})"


def generate_ssh_key_pair(comment: str = "airflow-distributed") -> SshKeyPair:
    """A fresh ed25519 key pair for one job (not pure: random)."""
    key = Ed25519PrivateKey.generate()
    private = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH, serialization.NoEncryption()
    ).decode()
    public = key.public_key().public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH).decode()
    return SshKeyPair(private_key=private, public_key=f"{public} {comment}".strip())


def ssh_secret(
    name: str, namespace: str, key_pair: SshKeyPair, labels: Mapping[str, str], annotations: Mapping[str, str]
) -> client.V1Secret:
    """The job's key pair; immutable, since a job never rotates its key (and the kubelet then stops watching it)."""
    return model(
        client.V1Secret,
        api_version="v1",
        kind="Secret",
        metadata=model(
            client.V1ObjectMeta, name=name, namespace=namespace,
            labels=dict(labels), annotations=dict(annotations) or None,
        ),
        type="Opaque",
        immutable=True,
        string_data={
            PRIVATE_KEY: key_pair.private_key,
            PUBLIC_KEY: key_pair.public_key + "\n",
            AUTHORIZED_KEYS: key_pair.public_key + "\n",
            CLIENT_CONFIG: SSH_CLIENT_CONFIG,
        },
    )


def ssh_volume(secret_name: str, *, with_private_key: bool) -> client.V1Volume:
    """The Secret as ``/root/.ssh`` files; the private key only where ``with_private_key`` (the launcher)."""
    keys = [AUTHORIZED_KEYS, CLIENT_CONFIG]
    if with_private_key:
        keys = [PRIVATE_KEY, PUBLIC_KEY, *keys]
    items = [model(client.V1KeyToPath, key=key, path=key) for key in keys]
    source = model(client.V1SecretVolumeSource, secret_name=secret_name, items=items, default_mode=KEY_FILE_MODE)
    return model(client.V1Volume, name=VOLUME_NAME, secret=source)


def ssh_volume_mount() -> client.V1VolumeMount:
    return model(client.V1VolumeMount, name=VOLUME_NAME, mount_path=SSH_DIR, read_only=True)


def sshd_command() -> list[str]:
    """The main command of a standby replica: sshd in the foreground, logging to the pod's log."""
    return ["sh", "-c", SSHD_SCRIPT]
