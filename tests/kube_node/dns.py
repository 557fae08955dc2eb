"""The real node's cluster DNS: what CoreDNS's ``kubernetes`` plugin would answer for a job's replicas, which neither
Debian nor PyPI ships. Run by the node fixture as a process of its own:

    python -m tests.kube_node.dns --server URL --token-file F --ca-file F --listen 198.18.0.1 [--port 53]

A queries for ``<service>.<namespace>.svc.<domain>`` get the Service's ClusterIP, or for a headless Service the
addresses of its ready endpoints; ``<hostname>.<service>.<namespace>.svc.<domain>`` gets the endpoint of that
hostname (a pod whose ``hostname`` and ``subdomain`` name it, as the endpoint controller publishes it). Both are
read from the API server at each query, so an answer follows the cluster at once (a recreated replica's new
address). Every other name is NXDOMAIN: nothing outside the machine can be reached from the pods anyway, and a
pod's resolver tries its search domains first.
"""

from __future__ import annotations

import argparse
import json
import ssl
import sys
import threading
import urllib.error
import urllib.request
from typing import Any

from dnslib import QTYPE, RCODE, RR, A
from dnslib.server import BaseResolver, DNSLogger, DNSServer

TTL = 2


class ClusterNames(BaseResolver):
    def __init__(self, server: str, token: str, ca_file: str, domain: str):
        self.server = server.rstrip("/")
        self.token = token
        self.tls = ssl.create_default_context(cafile=ca_file)
        self.suffix = ("svc", *domain.strip(".").split("."))

    def _get(self, path: str) -> Any:
        request = urllib.request.Request(f"{self.server}{path}", headers={"Authorization": f"Bearer {self.token}"})
        try:
            with urllib.request.urlopen(request, context=self.tls, timeout=5) as answer:
                return json.load(answer)
        except urllib.error.HTTPError as error:
            if error.code == 404:
                return None
            raise

    def addresses(self, labels: tuple[str, ...]) -> list[str] | None:
        """The A records of a name; ``None`` when no such name exists (NXDOMAIN)."""
        if labels[-len(self.suffix):] != self.suffix:
            return None
        head = labels[: -len(self.suffix)]
        if len(head) == 2:
            hostname, (service_name, namespace) = None, head
        elif len(head) == 3:
            hostname, service_name, namespace = head
        else:
            return None
        service = self._get(f"/api/v1/namespaces/{namespace}/services/{service_name}")
        if service is None:
            return None
        cluster_ip = service["spec"].get("clusterIP")
        if hostname is None and cluster_ip not in (None, "", "None"):
            return [cluster_ip]
        endpoints = self._get(f"/api/v1/namespaces/{namespace}/endpoints/{service_name}") or {}
        ready = [address for subset in endpoints.get("subsets") or [] for address in subset.get("addresses") or []]
        if hostname is None:
            return [address["ip"] for address in ready]
        # A replica not ready yet has no address: NXDOMAIN, which the resolver asks again for after its back-off.
        return [address["ip"] for address in ready if address.get("hostname") == hostname] or None

    def resolve(self, request, handler):
        reply = request.reply()
        labels = tuple(label.decode("ascii", "replace").lower() for label in request.q.qname.label)
        try:
            found = self.addresses(labels)
        except Exception as error:  # the API server's trouble is SERVFAIL, as CoreDNS answers
            print(f"{request.q.qname}: {error}", file=sys.stderr, flush=True)
            reply.header.rcode = RCODE.SERVFAIL
            return reply
        if found is None:
            reply.header.rcode = RCODE.NXDOMAIN
        elif request.q.qtype in (QTYPE.A, QTYPE.ANY):
            for address in found:
                reply.add_answer(RR(request.q.qname, QTYPE.A, rdata=A(address), ttl=TTL))
        return reply


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--server", required=True)
    parser.add_argument("--token-file", required=True)
    parser.add_argument("--ca-file", required=True)
    parser.add_argument("--listen", required=True)
    parser.add_argument("--port", type=int, default=53)
    parser.add_argument("--domain", default="cluster.local")
    args = parser.parse_args(argv)
    with open(args.token_file) as token:
        resolver = ClusterNames(args.server, token.read().strip(), args.ca_file, args.domain)
    servers = [DNSServer(resolver, address=args.listen, port=args.port, tcp=tcp, logger=DNSLogger("-request,-reply"))
               for tcp in (False, True)]
    for server in servers:
        server.start_thread()
    print(f"serving *.svc.{args.domain} on {args.listen}:{args.port}", flush=True)
    threading.Event().wait()


if __name__ == "__main__":
    main()
