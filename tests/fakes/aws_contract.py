"""EC2's request contract, checked on the wire the way EC2 checks it, for tests/fakes/aws.py.

moto accepts nearly anything. EC2 does not: this module holds the fake to botocore's own EC2 service model
(the same ``ec2`` model boto3 serialises from, so the check cannot drift from the client) and adds the limits
the model does not carry. Each refusal comes back with EC2's error code and wording:

* an Action the model does not have -> ``InvalidAction``;
* a parameter the Action's input shape does not have -> ``UnknownParameter`` ("The parameter X is not
  recognized"); a required one missing -> ``MissingParameter``; an integer/boolean/enum value of the wrong
  form -> ``InvalidParameterValue``;
* ``ImageId`` not of the form ``ami-`` + 8 or 17 hex digits -> ``InvalidAMIID.Malformed``;
* ``UserData`` (base64 on the wire) whose decoded size is over 16,384 bytes -> ``InvalidParameterValue``
  "User data is limited to 16384 bytes" (EC2 user guide: "user data is limited to 16 KB, in raw form,
  before it is base64-encoded").
"""

from __future__ import annotations

import base64
import binascii
import re
from dataclasses import dataclass
from functools import cache
from typing import Any

import botocore.session
from botocore.model import ListShape, ServiceModel, Shape, StructureShape

USER_DATA_MAX = 16384
AMI_ID = re.compile(r"^ami-(?:[0-9a-f]{8}|[0-9a-f]{17})$")
PROTOCOL_KEYS = frozenset({"Action", "Version"})


@dataclass(frozen=True, slots=True)
class Ec2Refusal:
    """One EC2 error answer: code, message and HTTP status, as EC2 sends them."""

    code: str
    message: str
    status: int = 400


@cache
def ec2_model() -> ServiceModel:
    return botocore.session.get_session().get_service_model("ec2")


def _wire_name(member: str, shape: Shape) -> str:
    # botocore.serialize.EC2Serializer._get_serialized_name: queryName, else capitalised locationName.
    if "queryName" in shape.serialization:
        return str(shape.serialization["queryName"])
    if "name" in shape.serialization:
        name = str(shape.serialization["name"])
        return name[0].upper() + name[1:]
    return member


def _tree(params: dict[str, str]) -> dict[str, Any]:
    """``{"A.1.B": v}`` -> ``{"A": {"1": {"B": v}}}``; a key that is both a leaf and a prefix is malformed."""
    root: dict[str, Any] = {}
    for key, value in params.items():
        node = root
        parts = key.split(".")
        for part in parts[:-1]:
            nxt = node.setdefault(part, {})
            if not isinstance(nxt, dict):
                raise _Bad(Ec2Refusal("InvalidParameterCombination", f"The parameter {key} is not recognized"))
            node = nxt
        node[parts[-1]] = value
    return root


class _Bad(Exception):
    def __init__(self, refusal: Ec2Refusal) -> None:
        self.refusal = refusal
        super().__init__(refusal.message)


def _check(shape: Shape, value: Any, path: str) -> None:
    if isinstance(shape, StructureShape):
        if not isinstance(value, dict):
            raise _Bad(Ec2Refusal("InvalidParameterValue", f"Value for parameter {path} is invalid."))
        names = {_wire_name(m, s): (m, s) for m, s in shape.members.items()}
        for key, sub in value.items():
            if key not in names:
                raise _Bad(Ec2Refusal("UnknownParameter", f"The parameter {_join(path, key)} is not recognized"))
            _check(names[key][1], sub, _join(path, key))
        for required in shape.required_members:
            wire = _wire_name(required, shape.members[required])
            if wire not in value:
                raise _Bad(Ec2Refusal("MissingParameter",
                                      f"The request must contain the parameter {_join(path, wire)}"))
        return
    if isinstance(shape, ListShape):
        if not isinstance(value, dict) or not all(k.isdigit() and int(k) >= 1 for k in value):
            raise _Bad(Ec2Refusal("InvalidParameterValue", f"Value for parameter {path} is invalid."))
        for index, item in value.items():
            _check(shape.member, item, f"{path}.{index}")
        return
    if isinstance(value, dict):   # a scalar given sub-keys
        raise _Bad(Ec2Refusal("UnknownParameter", f"The parameter {path}.{next(iter(value))} is not recognized"))
    _scalar(shape, str(value), path)


def _scalar(shape: Shape, value: str, path: str) -> None:
    bad = Ec2Refusal("InvalidParameterValue", f"Value ({value[:64]}) for parameter {path} is invalid.")
    if shape.type_name in ("integer", "long"):
        if not re.fullmatch(r"-?\d+", value):
            raise _Bad(bad)
    elif shape.type_name == "boolean":
        if value not in ("true", "false"):
            raise _Bad(bad)
    elif shape.type_name in ("double", "float"):
        try:
            float(value)
        except ValueError:
            raise _Bad(bad) from None
    elif shape.type_name == "string" and shape.enum and value not in shape.enum:
        raise _Bad(bad)


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _limits(action: str, params: dict[str, str]) -> None:
    """The limits EC2 enforces that the service model does not state."""
    if action != "RunInstances":
        return
    image = params.get("ImageId")
    if image is not None and not AMI_ID.match(image):
        raise _Bad(Ec2Refusal("InvalidAMIID.Malformed", f'Invalid id: "{image[:64]}" (expecting "ami-...")'))
    user_data = params.get("UserData")
    if user_data is not None:
        try:
            raw = base64.b64decode(user_data, validate=True)
        except (binascii.Error, ValueError):
            raise _Bad(Ec2Refusal("InvalidParameterValue", "Invalid BASE64 encoding of user data.")) from None
        if len(raw) > USER_DATA_MAX:
            raise _Bad(Ec2Refusal("InvalidParameterValue", f"User data is limited to {USER_DATA_MAX} bytes"))


def check_request(params: dict[str, str]) -> Ec2Refusal | None:
    """EC2's refusal of this query-protocol request (form parameters), or None when EC2 would take it."""
    action = params.get("Action", "")
    model = ec2_model()
    if action not in model.operation_names:
        return Ec2Refusal("InvalidAction", f"The action {action[:64]} is not valid for this web service.")
    shape = model.operation_model(action).input_shape
    body = {k: v for k, v in params.items() if k not in PROTOCOL_KEYS}
    try:
        if shape is not None:
            _check(shape, _tree(body), "")
        elif body:
            raise _Bad(Ec2Refusal("UnknownParameter", f"The parameter {next(iter(body))} is not recognized"))
        _limits(action, params)
    except _Bad as bad:
        return bad.refusal
    return None
