"""AWS for tests: moto's server app (a maintained EC2 emulator) behind a small fault-injecting WSGI layer.

moto never runs out of capacity and never reclaims a spot instance, so this wrapper answers chosen EC2
Actions with EC2's own error XML (capacity, quota, throttling, auth, 5xx) for the next N calls, and
``interrupt`` reclaims an instance the way EC2 does: terminated, StateReason
Server.SpotInstanceTermination. That last part reaches into moto's in-process backend (moto 5.x).

    python -m tests.fakes.aws --port 5000
"""

from __future__ import annotations

import argparse
import threading
import urllib.parse
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterable
from typing import Any

from werkzeug.serving import make_server

from tests.contract.harness import Fault

ACCOUNT_ID = "123456789012"

#: fault -> (HTTP status, EC2 error code)
FAULT_ERRORS: dict[str, tuple[int, str]] = {
    Fault.CAPACITY.value: (500, "InsufficientInstanceCapacity"),
    Fault.QUOTA.value: (400, "VcpuLimitExceeded"),
    Fault.THROTTLE.value: (503, "RequestLimitExceeded"),
    Fault.AUTH.value: (403, "UnauthorizedOperation"),
    Fault.SERVER_ERROR.value: (500, "InternalError"),
}


def _error_xml(code: str) -> bytes:
    return (f"<?xml version=\"1.0\" encoding=\"UTF-8\"?><Response><Errors><Error><Code>{code}</Code>"
            f"<Message>injected {code}</Message></Error></Errors><RequestID>orch-fault</RequestID></Response>"
            ).encode()


class AwsFake:
    """moto in a thread on 127.0.0.1, with ``inject``, ``interrupt``, ``reset`` and request counts."""

    def __init__(self) -> None:
        from moto.server import DomainDispatcherApplication, create_backend_app

        self._moto = DomainDispatcherApplication(create_backend_app)
        self._faults: list[tuple[str, str, int]] = []   # (action, fault, remaining)
        self._lock = threading.Lock()
        self.actions: Counter[str] = Counter()
        self.last_params: dict[str, dict[str, str]] = {}   # action -> its query parameters, as sent
        self._server: Any = None
        self._thread: threading.Thread | None = None
        self.url = ""

    # --- WSGI ----------------------------------------------------------------------------------------
    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        action = self._action(environ)
        if action:
            self.actions[action] += 1
            self.last_params[action] = environ.get("orch.params", {})
            fault = self._take_fault(action)
            if fault is not None:
                status, code = FAULT_ERRORS[fault]
                body = _error_xml(code)
                start_response(f"{status} Error", [("Content-Type", "text/xml"), ("Content-Length", str(len(body)))])
                return [body]
        return self._moto(environ, start_response)

    @staticmethod
    def _action(environ: dict[str, Any]) -> str | None:
        query = urllib.parse.parse_qs(environ.get("QUERY_STRING", ""))
        if "Action" in query:
            return query["Action"][0]
        if environ.get("REQUEST_METHOD") == "POST" and "x-www-form-urlencoded" in environ.get("CONTENT_TYPE", ""):
            length = int(environ.get("CONTENT_LENGTH") or 0)
            body = environ["wsgi.input"].read(length)
            import io

            environ["wsgi.input"] = io.BytesIO(body)
            form = urllib.parse.parse_qs(body.decode("utf-8", "replace"))
            if "Action" in form:
                environ["orch.params"] = {k: v[0] for k, v in form.items()}
                return form["Action"][0]
        return None

    def _take_fault(self, action: str) -> str | None:
        with self._lock:
            for i, (act, fault, remaining) in enumerate(self._faults):
                if act == action and remaining != 0:
                    if remaining > 0:
                        self._faults[i] = (act, fault, remaining - 1)
                    return fault
        return None

    # --- switches ------------------------------------------------------------------------------------
    def inject(self, fault: str, times: int = 1, action: str = "RunInstances") -> None:
        """The next ``times`` calls of ``action`` fail with ``fault`` (-1: until reset)."""
        with self._lock:
            self._faults.append((action, fault, times))

    def interrupt(self, region: str, instance_id: str) -> None:
        """Reclaim a spot instance as EC2 does (moto internals: pinned to moto 5.x)."""
        from moto.ec2.models import ec2_backends
        from moto.ec2.models.instances import StateReason

        backend = ec2_backends[ACCOUNT_ID][region]
        inst = backend.get_instance(instance_id)
        inst.terminate()
        inst.state_reason = StateReason("Server.SpotInstanceTermination: Spot instance termination",
                                        "Server.SpotInstanceTermination")
        inst._reason = "Server.SpotInstanceTermination"

    def reset(self) -> None:
        with self._lock:
            self._faults.clear()
        self.actions.clear()
        self.last_params.clear()
        req = urllib.request.Request(f"{self.url}/moto-api/reset", method="POST", data=b"")
        urllib.request.urlopen(req, timeout=10).read()

    # --- lifecycle -----------------------------------------------------------------------------------
    def start(self, port: int = 0) -> str:
        self._server = make_server("127.0.0.1", port, self, threaded=True)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        self.url = f"http://127.0.0.1:{self._server.server_port}"
        return self.url

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None


def fake_credentials_env() -> dict[str, str]:
    return {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_SESSION_TOKEN": "testing",
            "AWS_DEFAULT_REGION": "us-east-1"}


def main() -> None:
    parser = argparse.ArgumentParser(description="moto EC2 with orch's fault switches")
    parser.add_argument("--port", type=int, default=5000)
    args = parser.parse_args()
    fake = AwsFake()
    print(f"serving on {fake.start(args.port)}", flush=True)
    threading.Event().wait()


if __name__ == "__main__":
    main()
