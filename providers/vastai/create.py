"""What a launch sends to PUT /asks/<id>/: the ``onstart`` (the ssh key, then the boot script from the
environment), the interruptible bid and the create body. Pure functions: the adapter finds the live ask first."""

from __future__ import annotations

import shlex
from typing import Any

from providers.base import DEFAULT_DISK_GB, LaunchSpec, Market
from providers.boot_env import BOOT_ENV, boot_env_value, run_boot_from_env
from providers.errors import InsufficientCapacityError, InvalidRequestError, PriceTooLowError

from .errors import PROVIDER
from .offers import disk_cost_hr, offer_price_hr, spot_bid
from .settings import Settings

#: The spec: "onstart field is limited to 4048 characters -- gzip+base64 for longer scripts".
ONSTART_MAX = 4048


def onstart_for(spec: LaunchSpec) -> str:
    """The ``onstart`` a launch of ``spec`` sends: the ssh key installed, then the boot script run from the pod's
    environment (``create_body`` puts it in ``env``): a few hundred characters whatever the script's size, so
    always under Vast's ONSTART_MAX."""
    parts = []
    if spec.ssh_public_key:
        key = shlex.quote(spec.ssh_public_key.strip())
        parts.append(f"mkdir -p ~/.ssh && chmod 700 ~/.ssh && echo {key} >> ~/.ssh/authorized_keys")
    if spec.startup_script:
        parts.append(run_boot_from_env("/root/orch-boot.sh", "/root/orch-boot.log"))
    onstart = "\n".join(parts)
    if len(onstart) > ONSTART_MAX:
        raise InvalidRequestError(f"onstart is {len(onstart)} characters; Vast takes {ONSTART_MAX} (a shorter ssh "
                                  "key)", provider=PROVIDER)
    return onstart


#: The disk a catalog row of Vast is priced with (providers/catalog/refresh/vast_source.py's DISK_GB).
CATALOG_DISK_GB = DEFAULT_DISK_GB


def no_dearer_than_quoted(ask: dict[str, Any], spec: LaunchSpec, settings: Settings) -> None:
    """Refuse, before any create, the live ask a catalog offer (no ask id) was matched to when it bills more than
    the offer was quoted at: the quote is what orch's plan showed and what the budgets' gate checked and reserved,
    so a dearer ask would break a $/h ceiling (or the job's own budget) with every check passed. The engine then
    moves on to its next offer, at that offer's price. Compared disk for disk: a catalog row is priced with
    ``CATALOG_DISK_GB``, so the disk a job asks for beyond it is its own, not a dearer ask."""
    price = offer_price_hr(ask, spec.offer.market, CATALOG_DISK_GB, bid_markup=settings.bid_markup)
    if price > spec.offer.price_hr + 1e-6:
        raise InsufficientCapacityError(
            f"no live {spec.offer.gpu_count}x {spec.offer.gpu} {spec.offer.market.value} ask at the "
            f"${spec.offer.price_hr:.2f}/h quoted: the cheapest, ask {ask.get('id')}, bills ${price:.4f}/h "
            f"(with {CATALOG_DISK_GB} GB of disk): not rented", provider=PROVIDER, code="dearer_than_quoted")


def bid_for(ask: dict[str, Any], spec: LaunchSpec, settings: Settings) -> float | None:
    """The interruptible bid ($/h for the machine, disk excluded), or None for on-demand.

    Always the quoted bid (``spot_bid`` of the live ``min_bid``): Vast bills an interruptible at its bid, so a bid
    raised toward ``max_price_hr`` would bill the cap, not the price the quote showed. ``max_price_hr`` is a cap
    only: a bid (plus the disk) above it is refused here, before any create, so nothing is rented or billed."""
    if spec.offer.market is not Market.SPOT:
        return None
    bid = spot_bid(float(ask["min_bid"]), settings.bid_markup)
    if spec.max_price_hr is not None:
        total = bid + disk_cost_hr(spec.disk_size(settings.disk_gb), float(ask.get("storage_cost") or 0.0))
        if total > spec.max_price_hr + 1e-9:
            raise PriceTooLowError(f"ask {ask.get('id')} needs a bid of ${bid:.4f}/h (${total:.4f}/h with the disk), "
                                   f"over max_price_hr ${spec.max_price_hr:.4f}/h: not rented", provider=PROVIDER,
                                   code="max_price_below_bid")
    return bid


def create_body(settings: Settings, spec: LaunchSpec, ask: dict[str, Any]) -> dict[str, Any]:
    """The PUT /asks/<id>/ body that rents ``ask`` for ``spec``."""
    port = settings.ssh_container_port
    return {
        "client_id": "me",
        "image": spec.image or settings.image,
        "disk": spec.disk_size(settings.disk_gb),
        "label": spec.name,
        "onstart": onstart_for(spec),
        "runtype": "ssh",
        "target_state": "running",
        "env": {f"-p {port}:{port}": "1",
                **({BOOT_ENV: boot_env_value(spec.startup_script)} if spec.startup_script else {})},
        "price": bid_for(ask, spec, settings),
    }
