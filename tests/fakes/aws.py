"""moto in server mode behind a small WSGI wrapper that injects EC2 faults and plants spot prices.

moto (run with 5.0.20, the dev floor, and 5.2.x) is the EC2/STS emulator; this module adds only what moto cannot do:

* ``fail(action, fault, times)``: answer the next ``times`` calls of an EC2 Action (``RunInstances``)
  with the EC2 error XML and HTTP status AWS uses for that fault.
* ``plant_spot_prices(...)``: answer DescribeSpotPriceHistory from planted rows (moto returns a
  constant 0.00001 from 2006 for every type/AZ).
* ``interrupt(instance_id)``: reclaim a spot instance the way EC2 does (terminated with StateReason
  Server.SpotInstanceTermination). This edits moto's in-process backend (moto internals, moto 5.2).
* placement groups (tests/fakes/aws_placement.py): moto has none; ``placement`` holds them.
* a RunInstances block device mapping smaller than the AMI's snapshot for that device is refused 400
  ``InvalidBlockDeviceMapping`` "Volume of size 15GB is smaller than snapshot 'snap-...', expect size >= 30GB", as
  EC2 does (its words as EC2 users report them, e.g. scylladb/scylladb#6999, openshift/origin-ci-tool#153); moto
  launches it. The AMI's mappings are read from moto's backend (moto internals, as ``interrupt``).
* every EC2 request is first held to EC2's contract (tests/fakes/aws_contract.py: botocore's own EC2 model
  plus the ImageId form and the 16 KB user data limit) and refused in EC2's words when EC2 would refuse it;
  ``refusals`` keeps each refusal.
* ``requests`` counts every Action seen; ``sent`` keeps each Action's last form parameters, so tests can
  check what the adapter put on the wire (MaxPrice, UserData...), which moto does not store.
"""

from __future__ import annotations

import io
import re
import threading
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from urllib.parse import parse_qs
from xml.sax.saxutils import escape

from moto.server import DomainDispatcherApplication, create_backend_app
from werkzeug.serving import WSGIRequestHandler, make_server

from tests.fakes.aws_contract import Ec2Refusal, check_request
from tests.fakes.aws_placement import ACTIONS as PLACEMENT_ACTIONS
from tests.fakes.aws_placement import PlacementError, PlacementGroups
from tests.support.botocore_models import share_loaded_models

share_loaded_models()   # every session the tests open reads botocore's EC2 model once per process

ACCOUNT_ID = "123456789012"  # moto's default account
FAKE_ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SESSION_TOKEN": "testing",
    "AWS_EC2_METADATA_DISABLED": "true",
}

# fault name -> (EC2 error code, HTTP status) as EC2 sends them; MESSAGES holds EC2's wording for them.
FAULTS: dict[str, tuple[str, int]] = {
    "capacity": ("InsufficientInstanceCapacity", 500),
    "quota": ("VcpuLimitExceeded", 400),
    "throttle": ("RequestLimitExceeded", 503),
    "auth": ("AuthFailure", 401),
    "unauthorized": ("UnauthorizedOperation", 403),
    "server-error": ("InternalError", 500),
    "unavailable": ("Unavailable", 503),
    "price-too-low": ("SpotMaxPriceTooLow", 400),
}
MESSAGES: dict[str, str] = {
    "InsufficientInstanceCapacity": "We currently do not have sufficient capacity in the Availability Zone you "
    "requested. Our system will be working on provisioning additional capacity. You can currently get capacity "
    "by not specifying an Availability Zone in your request or choosing a different Availability Zone.",
    "VcpuLimitExceeded": "You have requested more vCPU capacity than your current vCPU limit of 0 allows for the "
    "instance bucket that the specified instance type belongs to. Please visit "
    "http://aws.amazon.com/contact-us/ec2-request to request an adjustment to this limit.",
    "SpotMaxPriceTooLow": "Your Spot request price of 0.001 is lower than the minimum required Spot request "
    "fulfillment price of 0.1.",
    "RequestLimitExceeded": "Request limit exceeded.",
}


@dataclass(frozen=True, slots=True)
class SpotPrice:
    instance_type: str
    zone: str          # AZ name, e.g. us-east-1a
    zone_id: str       # AZ id, e.g. use1-az6
    price: float
    timestamp: datetime


class _Quiet(WSGIRequestHandler):
    def log_request(self, *args: Any, **kwargs: Any) -> None:
        pass


def _service_of(environ: dict[str, Any]) -> str:
    # SigV4 credential scope: AKID/date/region/service/aws4_request
    try:
        return environ.get("HTTP_AUTHORIZATION", "").split("Credential=", 1)[1].split("/")[3]
    except IndexError:
        return ""


def _region_of(environ: dict[str, Any]) -> str:
    # SigV4: "Credential=AKID/20240101/us-east-1/ec2/aws4_request"
    auth = environ.get("HTTP_AUTHORIZATION", "")
    try:
        return auth.split("Credential=", 1)[1].split("/")[2]
    except IndexError:
        return "us-east-1"


def _volume_below_snapshot(params: dict[str, str], region: str) -> Ec2Refusal | None:
    """EC2's refusal of a mapping whose VolumeSize is under the size of the AMI's snapshot for its device."""
    from moto.ec2.models import ec2_backends

    try:
        ami = ec2_backends[ACCOUNT_ID][region].describe_images(ami_ids=[params.get("ImageId", "")])[0]
        snapshot = ami.ebs_snapshot
        floor, device = int(snapshot.volume.size), str(ami.root_device_name)
    except Exception:   # an AMI moto does not hold (or holds without a snapshot): nothing to compare with
        return None
    for key, name in params.items():
        m = re.fullmatch(r"BlockDeviceMapping\.(\d+)\.DeviceName", key)
        size = params.get(f"BlockDeviceMapping.{m.group(1)}.Ebs.VolumeSize") if m else None
        if name == device and size is not None and size.isdigit() and int(size) < floor:
            return Ec2Refusal("InvalidBlockDeviceMapping", f"Volume of size {size}GB is smaller than snapshot "
                                                           f"'{snapshot.id}', expect size >= {floor}GB")
    return None


class FakeAws:
    """A running moto server on 127.0.0.1:<free port>. ``endpoint_url`` is what the adapter uses."""

    def __init__(self) -> None:
        self._moto = DomainDispatcherApplication(create_backend_app)
        self._lock = threading.Lock()
        self._faults: dict[str, list[tuple[str, int, int]]] = {}   # action -> [(code, status, remaining)]
        self._spot: list[SpotPrice] | None = None
        self.requests: Counter[str] = Counter()
        self.sent: dict[str, dict[str, str]] = {}
        self.placement = PlacementGroups()
        self.validated: Counter[str] = Counter()   # EC2 Actions checked against botocore's model
        self.refusals: list[tuple[str, Ec2Refusal]] = []   # (Action, refusal) for each request EC2 would refuse
        self._server = make_server("127.0.0.1", 0, self._app, threaded=True, request_handler=_Quiet)
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.02},
                                        name="fake-aws", daemon=True)
        self._thread.start()
        self.endpoint_url = f"http://127.0.0.1:{self._server.server_port}"

    # -- switches ---------------------------------------------------------------------------------------
    def fail(self, action: str, fault: str, times: int = 1) -> None:
        """Fail the next ``times`` calls of ``action`` with ``fault`` (a FAULTS key or an EC2 error code)."""
        code, status = FAULTS.get(fault, (fault, 400))
        with self._lock:
            self._faults.setdefault(action, []).append((code, status, times))

    def plant_spot_prices(self, prices: Iterable[SpotPrice]) -> None:
        with self._lock:
            self._spot = list(prices)

    def interrupt(self, ec2_instance_id: str, region: str = "us-east-1") -> None:
        """Reclaim a spot instance as EC2 does. moto internals (moto 5.2): Instance.terminate + state_reason."""
        from moto.ec2.models import ec2_backends
        from moto.ec2.models.instances import StateReason

        instance = ec2_backends[ACCOUNT_ID][region].get_instance(ec2_instance_id)
        instance.terminate()
        reason = StateReason("Server.SpotInstanceTermination: Spot instance termination",
                             "Server.SpotInstanceTermination")
        instance.state_reason = reason      # moto >= 5.1 serialises this attribute
        instance._state_reason = reason     # moto 5.0.x (the dev floor) renders this one in its XML template
        instance._reason = "Server.SpotInstanceTermination"

    def reset(self) -> None:
        """Forget faults, planted prices and counters, and clear moto's state."""
        with self._lock:
            self._faults.clear()
            self._spot = None
            self.requests.clear()
            self.sent.clear()
            self.refusals.clear()
            self.validated.clear()
        self.placement.reset()
        req = urllib.request.Request(f"{self.endpoint_url}/moto-api/reset", method="POST", data=b"")
        with urllib.request.urlopen(req, timeout=10) as resp:
            resp.read()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    # -- WSGI -------------------------------------------------------------------------------------------
    def _app(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        body = b""
        if environ.get("REQUEST_METHOD") == "POST":
            length = int(environ.get("CONTENT_LENGTH") or 0)
            body = environ["wsgi.input"].read(length) if length else b""
            environ["wsgi.input"] = io.BytesIO(body)
        params = {k: v[0] for k, v in parse_qs(body.decode("utf-8", "replace")).items()}
        action = params.get("Action")
        if action:
            with self._lock:
                self.requests[action] += 1
                self.sent[action] = params
                refusal = None
                if _service_of(environ) == "ec2":
                    self.validated[action] += 1
                    refusal = check_request(params)
                    if refusal is None and action == "RunInstances":
                        refusal = _volume_below_snapshot(params, _region_of(environ))
                if refusal is not None:
                    self.refusals.append((action, refusal))
                fault = self._take_fault(action) if refusal is None else None
                spot = self._spot
            if refusal is not None:
                return self._error(start_response, refusal.code, refusal.status, refusal.message)
            if fault is not None:
                return self._error(start_response, *fault)
            if action == "DescribeSpotPriceHistory" and spot is not None:
                return self._spot_history(start_response, spot, params, _region_of(environ))
            if action in PLACEMENT_ACTIONS or action == "RunInstances":
                return self._placement_app(action, params, environ, start_response)
        return self._moto(environ, start_response)  # type: ignore[no-any-return]

    def _placement_app(self, action: str, params: dict[str, str], environ: dict[str, Any],
                       start_response: Callable[..., Any]) -> Iterable[bytes]:
        region = _region_of(environ)
        try:
            if action != "RunInstances":
                xml = self.placement.handle(action, params, lambda i: self._alive(region, i)).encode()
                start_response("200 OK", [("Content-Type", "text/xml"), ("Content-Length", str(len(xml)))])
                return iter([xml])
            group = self.placement.check_launch(params)
        except PlacementError as exc:
            return self._error(start_response, exc.code, 400)
        if group is None:
            return self._moto(environ, start_response)  # type: ignore[no-any-return]
        answer = b"".join(self._moto(environ, start_response))
        self.placement.launched(group, re.findall(r"<instanceId>(i-[0-9a-f]+)</instanceId>", answer.decode()))
        return iter([answer])

    @staticmethod
    def _alive(region: str, ec2_instance_id: str) -> bool:
        from moto.ec2.models import ec2_backends

        try:
            instance = ec2_backends[ACCOUNT_ID][region].get_instance(ec2_instance_id)
        except Exception:   # moto raises its own InvalidInstanceID error for an unknown id
            return False
        return str(instance.state) != "terminated"

    def _take_fault(self, action: str) -> tuple[str, int] | None:
        queue = self._faults.get(action)
        if not queue:
            return None
        code, status, remaining = queue[0]
        if remaining <= 1:
            queue.pop(0)
        else:
            queue[0] = (code, status, remaining - 1)
        return code, status

    @staticmethod
    def _error(start_response: Callable[..., Any], code: str, status: int, message: str = "") -> Iterator[bytes]:
        message = message or MESSAGES.get(code, f"injected {code}")
        xml = (f"<?xml version=\"1.0\" encoding=\"UTF-8\"?><Response><Errors><Error><Code>{escape(code)}</Code>"
               f"<Message>{escape(message)}</Message></Error></Errors>"
               "<RequestID>fake-aws-fault</RequestID></Response>").encode()
        start_response(f"{status} Injected", [("Content-Type", "text/xml"), ("Content-Length", str(len(xml)))])
        return iter([xml])

    @staticmethod
    def _spot_history(start_response: Callable[..., Any], spot: list[SpotPrice], params: dict[str, str],
                      region: str) -> Iterator[bytes]:
        types = {v for k, v in params.items() if k.startswith("InstanceType.")}
        items = "".join(
            f"<item><instanceType>{p.instance_type}</instanceType><productDescription>Linux/UNIX</productDescription>"
            f"<spotPrice>{p.price:.6f}</spotPrice><timestamp>{p.timestamp.strftime('%Y-%m-%dT%H:%M:%S.000Z')}"
            f"</timestamp><availabilityZone>{p.zone}</availabilityZone>"
            f"<availabilityZoneId>{p.zone_id}</availabilityZoneId></item>"
            for p in spot if p.zone.startswith(region) and (not types or p.instance_type in types))
        xml = ("<?xml version=\"1.0\" encoding=\"UTF-8\"?><DescribeSpotPriceHistoryResponse "
               "xmlns=\"http://ec2.amazonaws.com/doc/2016-11-15/\"><requestId>fake-aws-spot</requestId>"
               f"<spotPriceHistorySet>{items}</spotPriceHistorySet><nextToken></nextToken>"
               "</DescribeSpotPriceHistoryResponse>").encode()
        start_response("200 OK", [("Content-Type", "text/xml"), ("Content-Length", str(len(xml)))])
        return iter([xml])
