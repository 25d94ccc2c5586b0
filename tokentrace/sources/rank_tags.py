"""Rank identity: the whole tokenspeed tag (DP, CP, TP, stage), never a bare integer."""

from __future__ import annotations

import dataclasses
import re

STAGES = ("EXTEND", "DECODE", "MIXED")

# DP/CP are optional prefixes; the legacy form writes "TP-<t>" (and, by analogy, "DP-<d>").
TAG_PATTERN = r"(?:DP-?(?P<dp>\d+)-)?(?:CP-?(?P<cp>\d+)-)?TP-?(?P<tp>\d+)(?:-(?P<stage>EXTEND|DECODE|MIXED))?"
_TAG_RE = re.compile(rf"^{TAG_PATTERN}$")


@dataclasses.dataclass(frozen=True, order=True)
class RankTag:
    """One scheduler rank, ordered by (dp, cp, tp, stage); ``None`` sorts before any number.

    Attributes:
        dp: data-parallel index, ``None`` when the file name carries no ``DP`` part.
        cp: context-parallel index, ``None`` when absent.
        tp: tensor-parallel index (always present in tokenspeed names).
        stage: ``""`` or one of ``EXTEND`` / ``DECODE`` / ``MIXED`` (profile_by_stage).
    """

    dp: int | None = dataclasses.field(default=None, compare=False)
    cp: int | None = dataclasses.field(default=None, compare=False)
    tp: int = dataclasses.field(default=0, compare=False)
    stage: str = dataclasses.field(default="", compare=False)
    _key: tuple = dataclasses.field(init=False, repr=False, compare=True)

    def __post_init__(self) -> None:
        key = (_none_first(self.dp), _none_first(self.cp), self.tp, self.stage)
        object.__setattr__(self, "_key", key)

    def __str__(self) -> str:
        parts = [f"DP{self.dp}"] if self.dp is not None else []
        parts += [f"CP{self.cp}"] if self.cp is not None else []
        parts.append(f"TP{self.tp}")
        parts += [self.stage] if self.stage else []
        return "-".join(parts)

    @classmethod
    def parse(cls, text: str) -> "RankTag":
        """Parses ``TP1``, ``DP0-CP1-TP3``, ``TP0-DECODE`` or the legacy ``TP-1``.

        Raises:
            ValueError: ``text`` is not a rank tag.
        """
        match = _TAG_RE.match(text)
        if not match:
            raise ValueError(f"not a rank tag: {text!r} (expected e.g. TP1, DP0-CP1-TP3, TP0-DECODE)")
        return cls.from_match(match)

    @classmethod
    def from_match(cls, match: re.Match) -> "RankTag":
        """Builds a tag from a match of :data:`TAG_PATTERN` (named groups dp, cp, tp, stage)."""
        groups = match.groupdict()
        return cls(
            dp=_int_or_none(groups["dp"]),
            cp=_int_or_none(groups["cp"]),
            tp=int(groups["tp"]),
            stage=groups["stage"] or "",
        )

    def as_args(self) -> dict:
        """The tag as the ``args`` fields of the ``tokentrace.rank`` instant."""
        return {"rank": str(self), "dp": self.dp, "cp": self.cp, "tp": self.tp, "stage": self.stage}


def _none_first(value: int | None) -> int:
    return -1 if value is None else value


def _int_or_none(text: str | None) -> int | None:
    return None if text is None else int(text)
