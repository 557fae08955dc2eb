"""``EmulatorProcess``: the emulator in a child process, reached over HTTP or HTTPS by the real client."""

from __future__ import annotations

import os

import pytest
from kubernetes import client, config

from tests.k8s_emulator.process import EmulatorProcess


@pytest.mark.parametrize("tls", [False, True], ids=["http", "https"])
def test_a_child_process_serves_the_api_and_answers_its_controls(tmp_path, tls):
    with EmulatorProcess(tls=tls) as emu:
        api = client.CoreV1Api(config.new_client_from_config(config_file=emu.write_kubeconfig(tmp_path / "k")))
        emu.create_namespace("p")
        api.create_namespaced_config_map("p", {"metadata": {"name": "a"}, "data": {"x": "1"}})

        assert emu.pid not in (None, os.getpid())
        assert emu.url.startswith("https://" if tls else "http://")
        assert emu.get("configmaps", "p", "a")["data"] == {"x": "1"}  # a method of KubeEmulator, in the child
        assert emu.count("configmaps", "p") == 1
        assert emu.request_summary() == {"POST configmaps": 1}
        with pytest.raises(KeyError, match="no resource"):
            emu.list("widgets")  # the child's exception, raised here
        assert emu.drop_connections() == 1  # the client's kept-alive connection

        # The client reconnects after the drop.
        assert [m.metadata.name for m in api.list_namespaced_config_map("p").items] == ["a"]
    assert emu.pid is None
