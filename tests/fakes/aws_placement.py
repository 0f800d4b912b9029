"""EC2 placement groups for the moto-based fake (moto 5.2 has no CreatePlacementGroup at all).

Answers CreatePlacementGroup, DescribePlacementGroups (filters ``group-name``, ``strategy`` and
``tag:<key>``; ``GroupName.N``) and DeletePlacementGroup in EC2's XML, with EC2's error codes:
``InvalidPlacementGroup.Duplicate`` (create of an existing name), ``InvalidPlacementGroup.Unknown``
(delete, describe by name, or RunInstances naming a group that does not exist) and
``InvalidPlacementGroup.InUse`` (delete while an instance launched into it is not terminated). Strategy
must be one of cluster/spread/partition. Which instances sit in a group is learnt from RunInstances'
answers (moto itself ignores ``Placement.GroupName``).
Shapes: https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_CreatePlacementGroup.html,
API_DescribePlacementGroups.html, API_DeletePlacementGroup.html, API_PlacementGroup.html.
"""

from __future__ import annotations

import itertools
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from xml.sax.saxutils import escape

ACTIONS = frozenset({"CreatePlacementGroup", "DescribePlacementGroups", "DeletePlacementGroup"})
_NS = "http://ec2.amazonaws.com/doc/2016-11-15/"
STRATEGIES = frozenset({"cluster", "spread", "partition"})


class PlacementError(Exception):
    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass
class Group:
    name: str
    strategy: str
    group_id: str
    tags: dict[str, str]
    members: set[str] = field(default_factory=set)   # EC2 instance ids launched into it


def _indexed(params: dict[str, str], prefix: str) -> list[str]:
    """``Prefix.1``, ``Prefix.2`` ... in order."""
    found = [(int(m.group(1)), v) for k, v in params.items() if (m := re.fullmatch(re.escape(prefix) + r"\.(\d+)", k))]
    return [v for _, v in sorted(found)]


class PlacementGroups:
    """The groups of one fake account (all regions share the name space here, as tests use one region)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._groups: dict[str, Group] = {}
        self._ids = itertools.count(1)

    def reset(self) -> None:
        with self._lock:
            self._groups.clear()

    def group(self, name: str) -> Group | None:
        with self._lock:
            return self._groups.get(name)

    def handle(self, action: str, params: dict[str, str], alive: Callable[[str], bool]) -> str:
        """The XML answer to ``action``; raises PlacementError with EC2's code."""
        with self._lock:
            if action == "CreatePlacementGroup":
                return self._create(params)
            if action == "DeletePlacementGroup":
                return self._delete(params, alive)
            return self._describe(params)

    def check_launch(self, params: dict[str, str]) -> str | None:
        """RunInstances: the group it names (None: none); Unknown when that group does not exist."""
        name = params.get("Placement.GroupName")
        if not name:
            return None
        with self._lock:
            if name not in self._groups:
                raise PlacementError("InvalidPlacementGroup.Unknown", f"The Placement Group '{name}' is unknown.")
        return name

    def launched(self, name: str, instance_ids: list[str]) -> None:
        with self._lock:
            if name in self._groups:
                self._groups[name].members |= set(instance_ids)

    def _create(self, params: dict[str, str]) -> str:
        name, strategy = params.get("GroupName", ""), params.get("Strategy", "")
        if not name:
            raise PlacementError("MissingParameter", "The request must contain the parameter GroupName")
        if strategy not in STRATEGIES:
            raise PlacementError("InvalidParameterValue", f"Value ({strategy}) for parameter strategy is invalid.")
        if name in self._groups:
            raise PlacementError("InvalidPlacementGroup.Duplicate", f"The Placement Group '{name}' already exists.")
        tags: dict[str, str] = {}
        for i in itertools.count(1):
            kind = params.get(f"TagSpecification.{i}.ResourceType")
            if kind is None:
                break
            if kind != "placement-group":
                raise PlacementError("InvalidParameterValue", f"'{kind}' is not a valid taggable resource type here")
            for j in itertools.count(1):
                key = params.get(f"TagSpecification.{i}.Tag.{j}.Key")
                if key is None:
                    break
                tags[key] = params.get(f"TagSpecification.{i}.Tag.{j}.Value", "")
        group = Group(name, strategy, f"pg-{next(self._ids):017x}", tags)
        self._groups[name] = group
        return f"<CreatePlacementGroupResponse xmlns=\"{_NS}\"><requestId>fake-pg</requestId><return>true</return>" \
               f"<placementGroup>{_item(group)}</placementGroup></CreatePlacementGroupResponse>"

    def _delete(self, params: dict[str, str], alive: Callable[[str], bool]) -> str:
        name = params.get("GroupName", "")
        group = self._groups.get(name)
        if group is None:
            raise PlacementError("InvalidPlacementGroup.Unknown", f"The Placement Group '{name}' is unknown.")
        if any(alive(i) for i in group.members):
            raise PlacementError("InvalidPlacementGroup.InUse", f"The placement group '{name}' is in use.")
        del self._groups[name]
        return f"<DeletePlacementGroupResponse xmlns=\"{_NS}\"><requestId>fake-pg</requestId>" \
               "<return>true</return></DeletePlacementGroupResponse>"

    def _describe(self, params: dict[str, str]) -> str:
        names = _indexed(params, "GroupName")
        unknown = [n for n in names if n not in self._groups]
        if unknown:
            raise PlacementError("InvalidPlacementGroup.Unknown", f"The Placement Group '{unknown[0]}' is unknown.")
        groups = [self._groups[n] for n in names] if names else list(self._groups.values())
        for i in itertools.count(1):
            fname = params.get(f"Filter.{i}.Name")
            if fname is None:
                break
            values = set(_indexed(params, f"Filter.{i}.Value"))
            groups = [g for g in groups if _matches(g, fname, values)]
        items = "".join(f"<item>{_item(g)}</item>" for g in groups)
        return f"<DescribePlacementGroupsResponse xmlns=\"{_NS}\"><requestId>fake-pg</requestId>" \
               f"<placementGroupSet>{items}</placementGroupSet></DescribePlacementGroupsResponse>"


def _matches(group: Group, name: str, values: set[str]) -> bool:
    if name == "group-name":
        return group.name in values
    if name == "strategy":
        return group.strategy in values
    if name.startswith("tag:"):
        return group.tags.get(name[4:]) in values
    if name == "state":
        return "available" in values
    raise PlacementError("InvalidParameterValue", f"The filter '{name}' is invalid")


def _item(group: Group) -> str:
    tags = "".join(f"<item><key>{escape(k)}</key><value>{escape(v)}</value></item>" for k, v in group.tags.items())
    return (f"<groupName>{escape(group.name)}</groupName><state>available</state>"
            f"<strategy>{group.strategy}</strategy><groupId>{group.group_id}</groupId><tagSet>{tags}</tagSet>")
