"""One-off: derive tests/fakes/schemas/vast_fields.json from Vast's OpenAPI spec (facts only).

The spec (vast-ai/docs @ e758d3501e4308439edcf55424a4360b8c039d1b, api-reference/openapi.yaml) carries no
license, so it is not copied into the project: this script keeps only facts for the routes and fields the
fake serves (paths, methods, status codes, field names, JSON types, enums, bounds), no prose.

    python scripts/derive_vast_fields.py /path/to/vastai-openapi.yaml > tests/fakes/schemas/vast_fields.json

Tests never run this; they read the JSON it wrote.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import yaml

SOURCE = {
    "repo": "vast-ai/docs",
    "commit": "e758d3501e4308439edcf55424a4360b8c039d1b",
    "path": "api-reference/openapi.yaml",
    "derived_by": "scripts/derive_vast_fields.py",
    "note": "facts only (routes, statuses, field names, JSON types, enums, bounds); no descriptions copied",
}

ROUTES = (
    ("post", "/api/v0/bundles"),
    ("put", "/api/v0/asks/{id}"),
    ("put", "/api/v0/instances/bid_price/{id}"),
    ("get", "/api/v0/instances/{id}"),
    ("put", "/api/v0/instances/{id}"),
    ("delete", "/api/v0/instances/{id}"),
    ("get", "/api/v1/instances"),
)

#: What the fake serves. Offer fields are typed from the spec's search-response example (the schema itself
#: says only "object, additionalProperties: true"), falling back to the request filter's eq type.
OFFER_FIELDS = [
    "id",
    "ask_contract_id",
    "bundle_id",
    "machine_id",
    "host_id",
    "num_gpus",
    "gpu_name",
    "gpu_ram",
    "gpu_total_ram",
    "gpu_arch",
    "compute_cap",
    "cuda_max_good",
    "driver_version",
    "cpu_arch",
    "cpu_cores",
    "cpu_cores_effective",
    "cpu_ram",
    "disk_space",
    "disk_bw",
    "dph_base",
    "dph_total",
    "min_bid",
    "storage_cost",
    "inet_up",
    "inet_down",
    "inet_up_cost",
    "inet_down_cost",
    "direct_port_count",
    "reliability",
    "reliability2",
    "score",
    "geolocation",
    "verified",
    "verification",
    "rentable",
    "rented",
    "is_bid",
    "static_ip",
    "bw_nvlink",
    "public_ipaddr",
]
INSTANCE_FIELDS = [
    "id",
    "machine_id",
    "host_id",
    "bundle_id",
    "label",
    "actual_status",
    "intended_status",
    "cur_state",
    "next_state",
    "status_msg",
    "image_uuid",
    "image_args",
    "image_runtype",
    "onstart",
    "num_gpus",
    "gpu_name",
    "gpu_ram",
    "gpu_totalram",
    "gpu_arch",
    "cpu_arch",
    "cpu_cores",
    "cpu_cores_effective",
    "cpu_ram",
    "disk_space",
    "geolocation",
    "public_ipaddr",
    "ssh_host",
    "ssh_idx",
    "ssh_port",
    "direct_port_count",
    "ports",
    "is_bid",
    "min_bid",
    "dph_base",
    "dph_total",
    "storage_cost",
    "reliability2",
    "verification",
    "rentable",
    "start_date",
]
INTEGER_OFFER_FIELDS = frozenset(
    [
        "id",
        "ask_contract_id",
        "bundle_id",
        "machine_id",
        "host_id",
        "num_gpus",
        "gpu_ram",
        "gpu_total_ram",
        "compute_cap",
        "cpu_cores",
        "cpu_ram",
        "direct_port_count",
    ]
)
CREATE_FIELDS = ["image", "label", "disk", "runtype", "target_state", "price", "env", "onstart", "args", "image_login"]
KEEP = (
    "type",
    "enum",
    "items",
    "properties",
    "additionalProperties",
    "minimum",
    "maximum",
    "minItems",
    "maxItems",
    "required",
    "maxLength",
    "$ref",
)


def facts(schema: Any) -> Any:
    """A schema with prose (description, example, default) removed, recursively."""
    if isinstance(schema, dict):
        out = {k: facts(v) for k, v in schema.items() if k in KEEP}
        if "properties" in schema:
            out["properties"] = {k: facts(v) for k, v in schema["properties"].items()}
        return out
    if isinstance(schema, list):
        return [facts(s) for s in schema]
    return schema


def json_type(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if value is None:
        return "null"
    return "object"


def union(*types: Any) -> Any:
    seen: list[str] = []
    for t in types:
        for one in t if isinstance(t, list) else [t]:
            if one and one not in seen:
                seen.append(one)
    # an integer in one example is a number elsewhere: "number" covers both
    if "integer" in seen and "number" in seen:
        seen.remove("integer")
    return seen[0] if len(seen) == 1 else seen


def main(path: str) -> None:
    with open(path, encoding="utf-8") as fh:
        spec = yaml.safe_load(fh)
    paths = spec["paths"]
    comps = spec["components"]["schemas"]

    routes = []
    for method, route in ROUTES:
        op = paths[route][method]
        routes.append(
            {
                "method": method,
                "path": route,
                "operationId": op.get("operationId"),
                "statuses": sorted(int(s) for s in op["responses"]),
            }
        )

    search = paths["/api/v0/bundles"]["post"]
    example = search["responses"]["200"]["content"]["application/json"]["example"]["offers"]
    filters = search["requestBody"]["content"]["application/json"]["schema"]["properties"]
    offer_props: dict[str, Any] = {}
    for f in OFFER_FIELDS:
        if f in example and example[f] is not None:
            t = json_type(example[f])
            # A whole number in the example is still a measure (price, bandwidth): only counts/ids are integers.
            offer_props[f] = {
                "type": "integer"
                if t == "integer" and f in INTEGER_OFFER_FIELDS
                else ("number" if t == "integer" else t)
            }
        elif f in filters and "eq" in filters[f].get("properties", {}):
            offer_props[f] = {"type": filters[f]["properties"]["eq"]["type"]}
        else:
            raise SystemExit(f"offer field {f} has no type in the spec: do not serve it")

    comp_inst = comps["Instance"]["properties"]
    list_op = paths["/api/v1/instances"]["get"]
    list_schema = list_op["responses"]["200"]["content"]["application/json"]["schema"]
    list_item = list_schema["properties"]["instances"]["items"]["properties"]
    inst_props: dict[str, Any] = {}
    for f in INSTANCE_FIELDS:
        a, b = comp_inst.get(f), list_item.get(f)
        if a is None and b is None:
            raise SystemExit(f"instance field {f} is not in the spec")
        if f == "ports":
            inst_props[f] = facts(b)  # see deviations: the component says array of integers
        else:
            merged = facts(a or b)
            merged["type"] = union((a or {}).get("type"), (b or {}).get("type"))
            inst_props[f] = merged
    for f, s in inst_props.items():
        if s.get("type") == "integer" and f in ("disk_space",):
            s["type"] = "number"

    create = paths["/api/v0/asks/{id}"]["put"]
    create_req = facts(create["requestBody"]["content"]["application/json"]["schema"])
    create_req["properties"] = {k: v for k, v in create_req["properties"].items() if k in CREATE_FIELDS}
    create_req["properties"]["client_id"] = {"type": "string", "enum": ["me"]}
    create_req["properties"]["price"]["type"] = ["number", "null"]
    create_req["properties"]["env"] = {"type": ["string", "object"], "additionalProperties": {"type": "string"}}

    search_req = facts(search["requestBody"]["content"]["application/json"]["schema"])
    search_req["properties"]["type"]["enum"] = sorted({*search_req["properties"]["type"]["enum"], "on-demand"})
    search_req["additionalProperties"] = False
    order = search_req["properties"]["order"]
    # The spec puts minItems/maxItems 2 on the list of sort entries; its prose says each ENTRY has two.
    order["items"].update(minItems=order.pop("minItems"), maxItems=order.pop("maxItems"))

    def response(route: str, method: str, status: str) -> Any:
        return facts(paths[route][method]["responses"][status]["content"]["application/json"]["schema"])

    def resolve(schema: Any) -> Any:
        if isinstance(schema, dict) and "$ref" in schema:
            return facts(comps[schema["$ref"].rsplit("/", 1)[1]])
        return schema

    responses: dict[str, dict[str, Any]] = {}
    for method, route in ROUTES:
        for status in paths[route][method]["responses"]:
            schema = resolve(response(route, method, status))
            responses.setdefault(f"{method} {route}", {})[status] = schema
    responses["post /api/v0/bundles"]["200"]["properties"]["offers"]["items"] = {"$ref": "#/$defs/offer"}
    responses["get /api/v0/instances/{id}"]["200"]["properties"]["instances"] = {
        "anyOf": [{"$ref": "#/$defs/instance"}, {"type": "null"}]
    }
    responses["get /api/v1/instances"]["200"]["properties"]["instances"]["items"] = {"$ref": "#/$defs/instance"}

    out = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "source": SOURCE,
        "routes": routes,
        "undocumented_statuses": {
            "*": {"503": "the fake's server-error fault; the spec documents no 5xx on these routes"},
            "delete /api/v0/instances/{id}": {"401": "bad key; documented (Error, auth_error) on sibling routes"},
            "put /api/v0/instances/bid_price/{id}": {"401": "bad key; documented on sibling routes"},
        },
        "deviations": [
            'GET /api/v0/instances/{id} answers {"instances": null} for an unknown id (the vast CLI and dstack '
            "rely on it); the spec types instances as the Instance object only",
            "ports: components.schemas.Instance types it as an array of integers, GET /api/v1/instances as the "
            'docker port map {"22/tcp": [{HostIp, HostPort}]}; the fake serves the map everywhere, as the vast '
            "CLI reads ports['22/tcp']",
            "POST /api/v0/bundles type: the spec's enum says 'ondemand' while its own example and the vast CLI "
            "send 'on-demand'; both are accepted",
            "PUT /api/v0/asks/{id} env: the spec types it as a docker-flags string; the vast CLI sends an object "
            '({"-p 10022:10022": "1"}); both are accepted',
            "POST /api/v0/bundles order: the spec sets minItems/maxItems 2 on the list of sort entries, while "
            "its description (and the vast CLI) make each entry a [field, direction] pair; the schema here "
            "bounds each entry",
            "PUT /api/v0/asks/{id} price: null (on-demand) is sent by the vast CLI; the spec types a number",
            "PUT /api/v0/asks/{id} out of credit: the spec documents no response for it; the fake answers 403 "
            "with error 'insufficient_credit' (an unverified identifier)",
            "PUT /api/v0/asks/{id} bid below min_bid: error 'invalid_price' (in the spec's 400 enum); with "
            "low_bid_creates_stopped the fake answers 200 {success: false} and leaves a stopped instance",
        ],
        "$defs": {
            "offer": {
                "type": "object",
                "required": ["id", "num_gpus", "gpu_name", "gpu_ram", "dph_base", "min_bid", "storage_cost"],
                "properties": offer_props,
                "additionalProperties": False,
            },
            "instance": {
                "type": "object",
                "required": ["id", "actual_status", "intended_status", "label"],
                "properties": inst_props,
                "additionalProperties": False,
            },
            "create_request": create_req,
            "search_request": search_req,
            "manage_request": facts(
                paths["/api/v0/instances/{id}"]["put"]["requestBody"]["content"]["application/json"]["schema"]
            ),
            "bid_request": facts(
                paths["/api/v0/instances/bid_price/{id}"]["put"]["requestBody"]["content"]["application/json"]["schema"]
            ),
            "list_params": {p["name"]: facts(p["schema"]) for p in list_op["parameters"]},
        },
        "responses": responses,
    }
    json.dump(out, sys.stdout, indent=1, sort_keys=False)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "../shared/reference/specs/vastai-openapi.yaml")
