"""Command line: run a fake API server until SIGTERM (see the package docstring)."""
import argparse
import json
import signal
import sys
import threading

from .server import FakeApiServer


def main(argv=None):
    p = argparse.ArgumentParser(prog="python3 -m doubles.fakeapi",
                                description="fake kube-apiserver for tests")
    p.add_argument("--dir", required=True,
                   help="where ca.crt, token, kubeconfig, ... are written")
    p.add_argument("--port", type=int, default=0, help="API port (0: any)")
    p.add_argument("--control-port", type=int, default=0,
                   help="control port (0: any)")
    p.add_argument("--bookmark-interval", type=float, default=1.0,
                   help="seconds between watch bookmarks")
    p.add_argument("--load", action="append", default=[],
                   help="JSON or YAML file of objects to create at start")
    args = p.parse_args(argv)

    api = FakeApiServer(args.dir, port=args.port, control_port=args.control_port,
                        bookmark_interval=args.bookmark_interval)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    api.start()
    try:
        for path in args.load:
            api.load(path)
        print(json.dumps(api.endpoints()), flush=True)
        while not stop.wait(3600):
            pass
    finally:
        api.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
