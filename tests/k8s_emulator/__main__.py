"""``python -m tests.k8s_emulator --kubeconfig PATH``: serve an emulator on 127.0.0.1 until interrupted."""

from __future__ import annotations

import argparse
import signal
import threading

from .server import KubeEmulator


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--kubeconfig", required=True, help="where to write a kubeconfig for the emulator")
    parser.add_argument("--kubernetes-version", default="1.31")
    parser.add_argument("--bookmark-interval", type=float, default=60.0)
    args = parser.parse_args()
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    with KubeEmulator(args.kubernetes_version, bookmark_interval=args.bookmark_interval) as emu:
        print(f"serving on {emu.url}; kubeconfig {emu.write_kubeconfig(args.kubeconfig)}", flush=True)
        try:
            stop.wait()
        except KeyboardInterrupt:
            pass


if __name__ == "__main__":
    main()
