"""GCE's request contract for tests/fakes/gce.py: the compute v1 Discovery document plus the limits it omits.
Instance and ResourcePolicy insert bodies are held to it.

The document ships in the google-api-python-client wheel (Apache-2.0): ``googleapiclient/discovery_cache/
documents/compute.v1.json``; it is read from the installed package, not copied. An insert body is refused the
way GCE refuses it:

* a field of the wrong type or enum value -> 400 ``invalid`` "Invalid value for field 'resource.<path>'";
* a field the schema does not define -> 400 ``badRequest`` "Invalid JSON payload received. Unknown name ...";
* two network interfaces on one VPC network, or a multi-NIC A3 VM with a NIC that is not gVNIC -> 400
  ``invalid`` (GCE: each NIC of a multi-NIC VM on its own network; the A3 docs: gVNIC);
* ``disks[].initializeParams.sourceImage`` that is not an image URL or partial path
  (``[projects/P/]global/images/NAME`` or ``.../images/family/FAMILY``) -> 400 ``invalid`` "The URL is malformed.";
* a metadata value over 262,144 characters -> 413 ``fieldSizeTooLarge`` ("Value for field
  'metadata.items[N].value' is too large: maximum size 262144 character(s); actual size M."), all metadata
  over 512 KB -> the same shape on 'resource.metadata'; a key over 128 characters or outside [a-zA-Z0-9-_]
  -> 400 ``invalid`` (GCE docs, "About VM metadata": limits);
* labels (the instance's and its boot disk's) outside GCE's label rules: at most 64 labels, keys 1-63 and values
  0-63 characters, lowercase letters, digits, '_' and '-' only, a key starting with a lowercase letter -> 400
  ``invalid`` (Compute Engine docs, "Organize resources using labels": requirements for labels). The Discovery
  document types ``labels`` as a plain string map, so its schema alone takes ``{"Job": "My.Run"}``;
* a network tag (``tags.items``) that is not an RFC 1035 label -> 400 ``invalid`` "Invalid value for field
  'resource.tags.items[N]' ... Must be a match of regex" (Discovery document, Tags.items: "Each tag must be 1-63
  characters long, and comply with RFC1035", pattern ``[a-z](?:[-a-z0-9]{0,61}[a-z0-9])?``; the pattern sits on the
  array, where JSON Schema does not apply it, so the schema check alone took ``orch-team-``);
* ``scheduling`` that GCE refuses although each field is a valid enum value: a VM with GPUs (``guestAccelerators``,
  or an accelerator-optimized a2/a3/a4/g2/g4 machine type, which brings its own) that is not Spot/preemptible and
  whose ``onHostMaintenance`` is not TERMINATE (absent means MIGRATE, the Discovery document's default for standard
  instances) -> 400 ``invalid`` "Instances with guest accelerators do not support live migration." (GCE's answer
  as reported by gcloud users, e.g. loft-sh/devpod#973 for a g2-standard-4 sent with no maintenance policy); a
  Spot or preemptible VM with ``automaticRestart: true`` or ``onHostMaintenance: MIGRATE`` -> 400 ``invalid``
  (Discovery document, Scheduling: "Preemptible instances cannot be automatically restarted", and TERMINATE is
  "the default and only possible behavior" for them; GCE's words, e.g. percona/mongo_terraform_ansible#34:
  "Scheduling must have preemptible be false when AutomaticRestart is true.").
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from jsonschema import Draft4Validator

METADATA_VALUE_MAX = 262144           # 256 KB per value
METADATA_TOTAL_MAX = 524288           # 512 KB for all entries together
METADATA_KEY = re.compile(r"^[a-zA-Z0-9_-]{1,128}$")
_NAME = re.compile(r"^[a-z](?:[-a-z0-9]{0,61}[a-z0-9])?$")
_IMAGE = re.compile(r"^(?:https://(?:www|compute)\.googleapis\.com/compute/(?:v1|beta|alpha)/)?"
                    r"(?:projects/[a-z][-a-z0-9.:]{0,62}/)?global/images/(?:family/)?[a-z](?:[-a-z0-9]{0,61}[a-z0-9])?$")


@dataclass(frozen=True, slots=True)
class GceRefusal:
    status: int
    reason: str
    message: str
    rpc_status: str = "INVALID_ARGUMENT"


def document_path() -> Path:
    import googleapiclient

    return Path(googleapiclient.__file__).parent / "discovery_cache" / "documents" / "compute.v1.json"


@cache
def discovery() -> dict[str, Any]:
    return json.loads(document_path().read_text())  # type: ignore[no-any-return]


def _fix_refs(node: Any) -> Any:
    if isinstance(node, dict):
        return {k: (f"#/schemas/{v}" if k == "$ref" and isinstance(v, str) else _fix_refs(v)) for k, v in node.items()}
    if isinstance(node, list):
        return [_fix_refs(v) for v in node]
    return node


@cache
def _validator(schema: str) -> Draft4Validator:
    return Draft4Validator({"$ref": f"#/schemas/{schema}", "schemas": _fix_refs(discovery()["schemas"])})


def _unknown_field(schema: dict[str, Any], value: Any, path: str) -> str | None:
    """The first key the document does not define (Discovery schemas do not say additionalProperties: false,
    but GCE's JSON parser refuses unknown names)."""
    if "$ref" in schema:
        schema = discovery()["schemas"][schema["$ref"]]
    if isinstance(value, dict):
        props = schema.get("properties")
        if props is not None:
            for key, sub in value.items():
                if key not in props:
                    return f"{path}.{key}" if path else key
                found = _unknown_field(props[key], sub, f"{path}.{key}" if path else key)
                if found:
                    return found
        elif isinstance(schema.get("additionalProperties"), dict):
            for key, sub in value.items():
                found = _unknown_field(schema["additionalProperties"], sub, f"{path}.{key}")
                if found:
                    return found
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for i, item in enumerate(value):
            found = _unknown_field(schema["items"], item, f"{path}[{i}]")
            if found:
                return found
    return None


def check_schema(schema: str, body: dict[str, Any]) -> GceRefusal | None:
    """GCE's refusal of a body that does not fit the Discovery document's ``schema`` (unknown names, types)."""
    unknown = _unknown_field({"$ref": schema}, body, "")
    if unknown:
        leaf = unknown.rsplit(".", 1)[-1]
        return GceRefusal(400, "badRequest", f'Invalid JSON payload received. Unknown name "{leaf}" at '
                                             f"'resource.{unknown}': Cannot find field.")
    for error in _validator(schema).iter_errors(body):
        where = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in error.absolute_path).lstrip(".")
        return GceRefusal(400, "invalid", f"Invalid value for field 'resource.{where}': {error.message[:120]}")
    return None


def check_resource_policy_insert(body: dict[str, Any]) -> GceRefusal | None:
    """GCE's refusal of a resourcePolicies.insert body: the schema, and a name GCE takes."""
    refusal = check_schema("ResourcePolicy", body)
    if refusal is None and not _NAME.match(str(body.get("name", ""))):
        return GceRefusal(400, "invalid", f"Invalid value for field 'resource.name': '{body.get('name')}'. Must be "
                                          "a match of regex '[a-z](?:[-a-z0-9]{0,61}[a-z0-9])?'")
    return refusal


def check_instance_insert(body: dict[str, Any]) -> GceRefusal | None:
    """GCE's refusal of an instances.insert body, or None when GCE would take it."""
    refusal = check_schema("Instance", body)
    if refusal is not None:
        return refusal
    nics = body.get("networkInterfaces") or []
    networks = [str(n.get("network", "")).rsplit("/", 1)[-1] for n in nics]
    if len(set(networks)) != len(networks):
        # "Each network interface must be attached to a different VPC network" (multiple NICs docs).
        return GceRefusal(400, "invalid", "Invalid value for field 'resource.networkInterfaces': two network "
                                          "interfaces on one network.")
    if "/a3-" in str(body.get("machineType", "")) and len(nics) > 1 and any(n.get("nicType") != "GVNIC" for n in nics):
        return GceRefusal(400, "invalid", "Invalid value for field 'resource.networkInterfaces': A3 machine types "
                                          "with more than one network interface require nicType GVNIC on each.")
    refusal = check_tags("resource.tags.items", (body.get("tags") or {}).get("items") or [])
    if refusal is not None:
        return refusal
    for i, disk in enumerate(body.get("disks") or []):
        image = (disk.get("initializeParams") or {}).get("sourceImage")
        if image is not None and not _IMAGE.match(image):
            return GceRefusal(400, "invalid", f"Invalid value for field 'resource.disks[{i}].initializeParams."
                                              f"sourceImage': '{image[:120]}'. The URL is malformed.")
    for where, labels in [("resource.labels", body.get("labels"))] + [
            (f"resource.disks[{i}].initializeParams.labels", (d.get("initializeParams") or {}).get("labels"))
            for i, d in enumerate(body.get("disks") or [])]:
        refusal = _labels(where, labels or {})
        if refusal is not None:
            return refusal
    return _metadata(body.get("metadata") or {}) or _scheduling(body)


def check_tags(where: str, tags: list[Any]) -> GceRefusal | None:
    """GCE's refusal of a network tag that is not an RFC 1035 label (Tags.items), at ``where[N]``; a firewall's
    targetTags and sourceTags name the same tags."""
    for i, tag in enumerate(tags):
        if not isinstance(tag, str) or not _NAME.fullmatch(tag):
            return GceRefusal(400, "invalid", f"Invalid value for field '{where}[{i}]': '{str(tag)[:80]}'. Must be a "
                                              "match of regex '(?:[a-z](?:[-a-z0-9]{0,61}[a-z0-9])?)'")
    return None


#: Accelerator-optimized machine families: their machine types bring GPUs without ``guestAccelerators``.
GPU_FAMILIES = ("a2-", "a3-", "a4-", "a4x-", "g2-", "g4-")


def _scheduling(body: dict[str, Any]) -> GceRefusal | None:
    """The scheduling combinations GCE refuses (module docstring): GPUs cannot live-migrate, Spot cannot restart."""
    sched = body.get("scheduling") or {}
    machine = str(body.get("machineType", "")).rsplit("/", 1)[-1]
    gpus = bool(body.get("guestAccelerators")) or machine.startswith(GPU_FAMILIES)
    spot = sched.get("provisioningModel") == "SPOT" or sched.get("preemptible") is True
    maintenance = sched.get("onHostMaintenance", "TERMINATE" if spot else "MIGRATE")
    if spot and sched.get("automaticRestart") is True:
        field = "preemptible" if sched.get("preemptible") is True else "provisioningModel"
        value = "true" if field == "preemptible" else "SPOT"
        return GceRefusal(400, "invalid", f"Invalid value for field 'resource.scheduling.{field}': '{value}'. "
                                          "Scheduling must have preemptible be false when AutomaticRestart is true.")
    if spot and maintenance != "TERMINATE":
        return GceRefusal(400, "invalid", "Invalid value for field 'resource.scheduling.onHostMaintenance': "
                                          f"'{maintenance}'.")
    if gpus and maintenance != "TERMINATE":
        return GceRefusal(400, "invalid", "Instances with guest accelerators do not support live migration.")
    return None


LABELS_MAX = 64
LABEL_TEXT_MAX = 63


def _label_text_ok(text: str) -> bool:
    """Lowercase letters (international ones too), digits, '_' and '-', at most 63 characters."""
    return len(text) <= LABEL_TEXT_MAX and all(
        c in "_-" or c.isdigit() or (c.isalpha() and not c.isupper() and (c.islower() or ord(c) > 127)) for c in text)


def _labels(where: str, labels: dict[str, Any]) -> GceRefusal | None:
    if len(labels) > LABELS_MAX:
        return GceRefusal(400, "invalid", f"Invalid value for field '{where}': {len(labels)} labels; at most "
                                          f"{LABELS_MAX} are allowed.")
    for key, value in labels.items():
        if not key or not _label_text_ok(key) or not (key[0].isalpha() and not key[0].isupper()):
            return GceRefusal(400, "invalid", f"Invalid value for field '{where}': ''. Label key '{key[:80]}' "
                              "violates format constraints. The key must start with a lowercase character, can only "
                              "contain lowercase letters, numeric characters, underscores and dashes. The key can "
                              "be at most 63 characters long. International characters are allowed.")
        if not _label_text_ok(str(value)):
            return GceRefusal(400, "invalid", f"Invalid value for field '{where}': ''. Label value "
                              f"'{str(value)[:80]}' violates format constraints. The value can only contain "
                              "lowercase letters, numeric characters, underscores and dashes. The value can be at "
                              "most 63 characters long. International characters are allowed.")
    return None


def _metadata(metadata: dict[str, Any]) -> GceRefusal | None:
    total = 0
    for i, item in enumerate(metadata.get("items") or []):
        key, value = str(item.get("key", "")), str(item.get("value", ""))
        if not METADATA_KEY.match(key):
            return GceRefusal(400, "invalid", f"Invalid value for field 'resource.metadata.items[{i}].key': "
                                              f"'{key[:64]}'. Must be a match of regex '[a-zA-Z0-9-_]{{1,128}}'")
        if len(value) > METADATA_VALUE_MAX:
            return GceRefusal(413, "fieldSizeTooLarge", f"Value for field 'metadata.items[{i}].value' is too large: "
                              f"maximum size {METADATA_VALUE_MAX} character(s); actual size {len(value)}.")
        total += len(key) + len(value)
    if total > METADATA_TOTAL_MAX:
        return GceRefusal(413, "fieldSizeTooLarge", f"Value for field 'resource.metadata' is too large: maximum "
                          f"size {METADATA_TOTAL_MAX} character(s); actual size {total}.")
    return None
