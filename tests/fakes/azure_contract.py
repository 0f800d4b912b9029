"""Azure's request contract for tests/fakes/azure_arm.py: the REST API spec's shapes plus the limits it states
in prose.

The shapes come from the models azure-mgmt-compute / azure-mgmt-network generate from Azure's REST API spec
(Azure/azure-rest-api-specs, MIT; the SDKs are MIT too), read from the installed packages, not copied: every
key of a VM/NIC/public IP/NSG PUT body must be a property of the spec's type, with the spec's JSON type. ARM
refuses what does not fit with 400 ``InvalidRequestContent`` ("The request content was invalid and could not be
deserialized: 'Could not find member 'x' on object of type 'T'. Path 'p'...'").

``osProfile.customData`` is limited by the spec's description: "a base-64 encoded string ... decoded to a
binary array ... The maximum length of the binary array is 65535 bytes"; ARM answers 400 ``InvalidParameter``
"Custom data in OSProfile must be in Base64 encoding and with a maximum length of 87380 characters."

``osProfile.adminUsername`` is limited by the spec's description too (OSProfile.adminUsername, azure-mgmt-compute's
model docstring): "**Disallowed values:** "administrator", "admin", "user", ... "root" ... **Minimum-length
(Linux):** 1 character **Max-length (Linux):** 64 characters"; ARM answers 400 ``InvalidParameter`` "The Admin
Username specified is not allowed." with target ``adminUsername`` (as reported e.g. in MicrosoftDocs/azure-docs#27881
and Azure/vagrant-azure#225). The list is compared without case, as azure-cli's own check of it does
(``username.lower() in disallowed_user_names``).
"""

from __future__ import annotations

import base64
import binascii
import enum
import typing
from dataclasses import dataclass
from functools import cache
from typing import Any

#: OSProfile.adminUsername's disallowed values, as the REST spec's description lists them.
DISALLOWED_ADMIN_USERNAMES = frozenset({
    "administrator", "admin", "user", "user1", "test", "user2", "test1", "user3", "admin1", "1", "123", "a",
    "actuser", "adm", "admin2", "aspnet", "backup", "console", "david", "guest", "john", "owner", "root", "server",
    "sql", "support", "support_388945a0", "sys", "test2", "test3", "user4", "user5"})
ADMIN_USERNAME_MAX_LINUX = 64
CUSTOM_DATA_MAX_BYTES = 65535
CUSTOM_DATA_MAX_CHARS = 87380      # 65535 bytes in base64


@dataclass(frozen=True, slots=True)
class ArmRefusal:
    code: str
    message: str
    target: str | None = None


class _Bad(Exception):
    def __init__(self, refusal: ArmRefusal) -> None:
        self.refusal = refusal
        super().__init__(refusal.message)


@cache
def _fields(cls: type) -> dict[str, tuple[str, Any]]:
    """rest name -> (attribute, type hint) for a TypeSpec-generated model class."""
    import importlib
    import sys

    module = sys.modules[cls.__module__]
    package = importlib.import_module(cls.__module__.rsplit(".", 1)[0])    # ...models: models and enums
    hints = typing.get_type_hints(cls, globalns=vars(module), localns={"_models": package, "_enums": package})
    sample = cls()
    out: dict[str, tuple[str, Any]] = {}
    for attr, field in type(sample)._attr_to_rest_field.items():
        out[field._rest_name] = (attr, hints.get(attr, Any))
    return out


def _is_model(tp: Any) -> bool:
    return isinstance(tp, type) and tp.__module__.endswith("models._models")


def _check(tp: Any, value: Any, path: str) -> None:
    origin = typing.get_origin(tp)
    if origin is typing.Union:
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if value is None:
            return
        problems = []
        for arg in args:
            try:
                _check(arg, value, path)
                return
            except _Bad as bad:
                problems.append(bad)
        raise problems[0]
    if origin is list:
        if not isinstance(value, list):
            raise _Bad(_content(f"Error converting value to a list. Path '{path}'."))
        (item,) = typing.get_args(tp)
        for i, v in enumerate(value):
            _check(item, v, f"{path}[{i}]")
        return
    if origin is dict:
        if not isinstance(value, dict):
            raise _Bad(_content(f"Error converting value to an object. Path '{path}'."))
        _, item = typing.get_args(tp)
        for k, v in value.items():
            _check(item, v, f"{path}.{k}")
        return
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        if not isinstance(value, str):
            raise _Bad(_content(f"Error converting value {value!r} to type '{tp.__name__}'. Path '{path}'."))
        return
    if tp in (str, int, float, bool):
        ok = (isinstance(value, str) if tp is str else isinstance(value, bool) if tp is bool
              else isinstance(value, (int, float)) and not isinstance(value, bool))
        if not ok:
            raise _Bad(_content(f"Error converting value {value!r} to type '{tp.__name__}'. Path '{path}'."))
        return
    if _is_model(tp):
        if not isinstance(value, dict):
            raise _Bad(_content(f"Error converting value to type '{tp.__name__}'. Path '{path}'."))
        fields = _fields(tp)
        for key, sub in value.items():
            if key not in fields:
                raise _Bad(_content(f"Could not find member '{key}' on object of type '{tp.__name__}'. "
                                    f"Path '{path + '.' if path else ''}{key}'."))
            _check(fields[key][1], sub, f"{path + '.' if path else ''}{key}")
    # Any / datetime / other scalars: taken as ARM takes them.


def _content(detail: str) -> ArmRefusal:
    return ArmRefusal("InvalidRequestContent",
                      f"The request content was invalid and could not be deserialized: '{detail}'")


def check_body(kind: str, body: Any) -> ArmRefusal | None:
    """ARM's refusal of a PUT body for ``kind`` (virtualMachines, networkInterfaces, publicIPAddresses,
    networkSecurityGroups, proximityPlacementGroups, availabilitySets), or None when ARM would take it."""
    from azure.mgmt.compute import models as cm
    from azure.mgmt.network import models as nm

    models: dict[str, type] = {"virtualmachines": cm.VirtualMachine, "networkinterfaces": nm.NetworkInterface,
                               "publicipaddresses": nm.PublicIPAddress,
                               "networksecuritygroups": nm.NetworkSecurityGroup,
                               "proximityplacementgroups": cm.ProximityPlacementGroup,
                               "availabilitysets": cm.AvailabilitySet}
    model = models.get(kind.lower())
    if model is None:
        return None
    try:
        _check(model, body, "")
        if model is cm.VirtualMachine:
            _custom_data(body)
            _admin_username(body)
    except _Bad as bad:
        return bad.refusal
    return None


def _custom_data(body: dict[str, Any]) -> None:
    custom = ((body.get("properties") or {}).get("osProfile") or {}).get("customData")
    if custom is None:
        return
    bad = ArmRefusal("InvalidParameter", "Custom data in OSProfile must be in Base64 encoding and with a maximum "
                     f"length of {CUSTOM_DATA_MAX_CHARS} characters.", "customData")
    try:
        raw = base64.b64decode(custom, validate=True)
    except (binascii.Error, ValueError):
        raise _Bad(bad) from None
    if len(custom) > CUSTOM_DATA_MAX_CHARS or len(raw) > CUSTOM_DATA_MAX_BYTES:
        raise _Bad(bad)


def _admin_username(body: dict[str, Any]) -> None:
    user = ((body.get("properties") or {}).get("osProfile") or {}).get("adminUsername")
    if user is None:
        return
    if not 1 <= len(user) <= ADMIN_USERNAME_MAX_LINUX or user.lower() in DISALLOWED_ADMIN_USERNAMES:
        raise _Bad(ArmRefusal("InvalidParameter", "The Admin Username specified is not allowed.", "adminUsername"))
