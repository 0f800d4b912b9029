"""Manifest errors: each one names the file, the line and column, the field and a fix-it hint.

Never a secret: the text is redacted (orchestrator.redaction) and cut to one line of bounded length.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path


class ManifestError(ValueError):
    """One problem in one manifest. ``str()`` gives ``path:line:col: field.path: what is wrong (hint)``.

    ``line`` and ``col`` are 1-based and None where the problem has no position (an unreadable file).
    """

    def __init__(self, path: Path | str, message: str, *, line: int | None = None, col: int | None = None,
                 field: str = "", hint: str | None = None) -> None:
        self.path = Path(path)
        self.line = line
        self.col = col
        self.field = field
        self.message = message
        self.hint = hint
        super().__init__(self.format())

    def format(self) -> str:
        """The one-line form; any secret-looking text in it is redacted, however it got there."""
        from orchestrator.redaction import safe_line

        where = str(self.path)
        if self.line is not None:
            where += f":{self.line}:{self.col or 1}"
        text = f"{where}: "
        if self.field:
            text += f"{self.field}: "
        text += self.message
        if self.hint:
            text += f" ({self.hint})"
        return safe_line(text, 1000).replace("\n", " ")

    @property
    def errors(self) -> list[ManifestError]:
        return [self]

    def __str__(self) -> str:
        return self.format()


class ManifestErrors(ManifestError):
    """Several problems found in one load. Looks like the first; ``errors`` holds them all, in file order."""

    def __init__(self, errors: Sequence[ManifestError]) -> None:
        if not errors:
            raise ValueError("ManifestErrors needs at least one error")
        self._all = list(errors)
        first = self._all[0]
        super().__init__(first.path, first.message, line=first.line, col=first.col, field=first.field,
                         hint=first.hint)

    @property
    def errors(self) -> list[ManifestError]:
        return list(self._all)

    def __str__(self) -> str:
        return "\n".join(e.format() for e in self._all)


def raise_all(errors: Sequence[ManifestError]) -> None:
    """Raise nothing, the one error, or a ManifestErrors holding them all."""
    if len(errors) == 1:
        raise errors[0]
    if errors:
        raise ManifestErrors(errors)
