"""The startup script's staging sections: where the checkpoint store and data sources are, the rclone
configuration they need, copying data in, and restoring the latest committed checkpoint. Pure and deterministic
(every operand quoted with ``shlex.quote``); render.py puts these sections into the script."""

from __future__ import annotations

import shlex

from orchestrator.runtime.objectstore import StoreKind, StoreTarget, parse_store
from orchestrator.runtime.render_input import RenderInput, ResumeVia

__all__ = ["CHECKPOINT_MARKER", "LATEST_NAME", "data_lines", "rclone_env", "restore_lines", "stores"]

#: The file a checkpoint directory holds once it is complete; a restore without it fails (exit 75).
CHECKPOINT_MARKER = "COMPLETE"
#: The store's pointer to the latest committed checkpoint directory.
LATEST_NAME = "LATEST"

_Q = shlex.quote


def stores(ri: RenderInput) -> tuple[StoreTarget | None, list[tuple[StoreTarget, str]]]:
    """The checkpoint store and the data sources that are stores (URLs are downloaded, see _fetch_sh)."""
    endpoint = ri.checkpoint.store_endpoint if ri.checkpoint else ""
    ckpt = parse_store(ri.checkpoint.store_uri, endpoint) if ri.checkpoint else None
    data = [(parse_store(d.source, endpoint), d.path) for d in ri.data if not d.is_url]
    return ckpt, data


def rclone_env(ckpt: StoreTarget | None, data: list[tuple[StoreTarget, str]]) -> list[tuple[str, str]]:
    merged: dict[str, str] = {}
    for target in [ckpt, *(t for t, _ in data)]:
        if target is not None:
            merged.update(target.env)
    return sorted(merged.items())


def _localcopy_sh(src: str, dest: str) -> str:
    return (f"mkdir -p {_Q(dest)} && if [ -d {_Q(src)} ]; then cp -R {_Q(src)}/. {_Q(dest)}/; "
            f"else cp {_Q(src)} {_Q(dest)}/; fi")


def copy_sh(target: StoreTarget, src: str, dest: str) -> str:
    if target.kind is StoreKind.LOCAL:
        return _localcopy_sh(src, dest)
    return f"mkdir -p {_Q(dest)} && rclone copy {_Q(src)} {_Q(dest)}"


# Defined in the script only when a data source is a URL: curl with retries (wget, else python3, where a host
# has no curl), into DEST.part first, so an interrupted download never looks like the file.
_FETCH_FUNCTION = [
    "orch_fetch() {  # URL DEST",
    '  mkdir -p "$(dirname -- "$2")"',
    "  if command -v curl >/dev/null 2>&1; then",
    '    curl -fsSL --retry 5 --retry-delay 2 --retry-connrefused -o "$2.part" "$1"',
    "  elif command -v wget >/dev/null 2>&1; then",
    '    wget -q --tries=5 --waitretry=2 -O "$2.part" "$1"',
    "  else",
    "    python3 -c 'import sys, urllib.request; urllib.request.urlretrieve(sys.argv[1], sys.argv[2])' "
    '"$1" "$2.part"',
    "  fi",
    '  mv -f -- "$2.part" "$2"',
    "}",
]


def data_lines(ri: RenderInput) -> list[str]:
    """Stage every data source, in the manifest's order: copy a store's path, download a URL."""
    endpoint = ri.checkpoint.store_endpoint if ri.checkpoint else ""
    lines = list(_FETCH_FUNCTION) if any(d.is_url for d in ri.data) else []
    for d in ri.data:
        if d.is_url:
            lines.append(f"orch_fetch {_Q(d.source)} {_Q(d.download_path)}")
        else:
            target = parse_store(d.source, endpoint)
            lines.append(copy_sh(target, target.path, d.path))
    return lines


def restore_lines(ri: RenderInput, ckpt: StoreTarget | None) -> list[str]:
    if ri.checkpoint is None or ckpt is None:
        return []
    c = ri.checkpoint
    latest = ckpt.child(LATEST_NAME)
    if ckpt.kind is StoreKind.LOCAL:
        read = [f"orch_latest=\"$( (cat {_Q(latest)} 2>/dev/null || true) | tr -d '[:space:]')\""]
    else:
        # rclone exits 3/4 when there is no LATEST (a first start); any other failure (credentials, network),
        # asked twice, the second time with its words in job.log, stops the node: a job started from scratch
        # beside a store that holds its progress would waste its budget and never move LATEST.
        cat = f"rclone cat {_Q(latest)}"
        read = [
            f'orch_rc=0; orch_latest="$({cat} 2>/dev/null)" || orch_rc=$?',
            f'case "$orch_rc" in 0|3|4) ;; *) orch_rc=0; orch_latest="$({cat})" || orch_rc=$? ;; esac',
            'case "$orch_rc" in 0|3|4) ;; *) echo "orch: cannot read the store\'s ' + LATEST_NAME
            + ' (rclone exited $orch_rc); not starting over" >&2; exit 75 ;; esac',
            "orch_latest=\"$(printf '%s' \"$orch_latest\" | tr -d '[:space:]')\"",
        ]
    restore_to = '"$ORCH_CHECKPOINT_DIR/$orch_latest"'
    if ckpt.kind is StoreKind.LOCAL:
        fetch = (f'mkdir -p {restore_to} && cp -R {_Q(ckpt.path.rstrip("/"))}/"$orch_latest"/. '
                 f'{restore_to}/')
    else:
        fetch = f'mkdir -p {restore_to} && rclone copy {_Q(ckpt.path.rstrip("/"))}/"$orch_latest" {restore_to}'
    lines = [
        'mkdir -p "$ORCH_CHECKPOINT_DIR"',
        "ORCH_RESUME_PATH=''",
        *read,
        # Only a well-formed name: LATEST is data from the store, never a path to follow.
        'case "$orch_latest" in step-*[!0-9]*|step-) orch_latest="" ;; step-*) ;; *) orch_latest="" ;; esac',
        'if [ -n "$orch_latest" ]; then',
        f"  {fetch}",
        f'  if [ ! -f "$ORCH_CHECKPOINT_DIR/$orch_latest/{CHECKPOINT_MARKER}" ]; then',
        '    echo "orch: restored checkpoint $orch_latest has no ' + CHECKPOINT_MARKER + ' marker" >&2; exit 75',
        "  fi",
        '  ORCH_RESUME_PATH="$ORCH_CHECKPOINT_DIR/$orch_latest"',
        '  echo "orch: resuming from $ORCH_RESUME_PATH" >&2',
        "fi",
        "export ORCH_RESUME_PATH",
    ]
    if c.resume_via is ResumeVia.ENV and c.resume_name != "ORCH_RESUME_PATH":
        lines.append(f'if [ -n "$ORCH_RESUME_PATH" ]; then export {c.resume_name}="$ORCH_RESUME_PATH"; fi')
    return lines
