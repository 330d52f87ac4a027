"""Command line: run a fake API server until SIGTERM (see the package docstring)."""
import argparse
import json
import signal
import sys
import time

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
    # The handler only notes the signal: Event.set() in a handler can wait
    # for ever on the Event's lock, held by the wait it interrupted.
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    signal.signal(signal.SIGINT, lambda *_: stop.append(1))
    api.start()
    try:
        for path in args.load:
            api.load(path)
        print(json.dumps(api.endpoints()), flush=True)
        while not stop:
            time.sleep(0.2)
    finally:
        api.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
