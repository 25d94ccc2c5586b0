"""Rank identity: the whole parallel tag (DP, PP, CP, TP, DCP, EP, stage), never a bare integer.

Canonical form (``str(tag)``, what merged files and messages show): the present dimensions from the
outermost to the innermost, as vLLM orders its worker names (``Worker_DP_PP_PCP_TP_DCP_EP``), then
the stage::

    [DP<d>-][PP<p>-][CP<c>-]TP<t>[-DCP<c>][-EP<e>][-<stage>]      e.g. DP0-PP1-TP2-EP0, TP0-DECODE

:data:`TAG_PATTERN` also reads the engines' own spellings inside file names: tokenspeed's
``[DP<d>-][CP<c>-]TP<t>`` and its legacy ``TP-<t>``, and SGLang's ``TP-<t>[-DP-<d>][-PP-<p>][-EP-<e>]``
(DP/PP written after TP). vLLM's ``dp<d>_pp<p>_tp<t>_dcp<c>_ep<e>_rank<r>`` is read by
:func:`RankTag.from_vllm`.
"""

from __future__ import annotations

import dataclasses
import re

STAGES = ("EXTEND", "DECODE", "MIXED")
# SGLang's ProfileManager (SGLANG_PROFILE_V2) names its stages after _get_stage_from_forward_mode:
# "prefill" is every extend batch, "decode" every decode batch.
_STAGE_ALIASES = {"prefill": "EXTEND", "decode": "DECODE"}

# DP/PP/CP before TP (tokenspeed, canonical) or DP/PP after it (SGLang), never both: the
# conditionals `(?(dp)...)` allow the later spelling only when the earlier one is absent.
TAG_PATTERN = (
    r"(?:DP-?(?P<dp>\d+)-)?(?:PP-?(?P<pp>\d+)-)?(?:CP-?(?P<cp>\d+)-)?TP-?(?P<tp>\d+)"
    r"(?:-DCP-?(?P<dcp>\d+))?(?(dp)|(?:-DP-?(?P<dp2>\d+))?)(?(pp)|(?:-PP-?(?P<pp2>\d+))?)"
    r"(?:-EP-?(?P<ep>\d+))?(?:-(?P<stage>EXTEND|DECODE|MIXED|prefill|decode))?"
)
_TAG_RE = re.compile(rf"^{TAG_PATTERN}$")
VLLM_TAG_PATTERN = r"dp(?P<dp>\d+)_pp(?P<pp>\d+)_tp(?P<tp>\d+)_dcp(?P<dcp>\d+)_ep(?P<ep>\d+)_rank(?P<rank>\d+)"


@dataclasses.dataclass(frozen=True, order=True)
class RankTag:
    """One scheduler rank, ordered by (dp, pp, cp, tp, dcp, ep, stage); ``None`` sorts before any number.

    Attributes:
        dp: data-parallel index, ``None`` when the file name carries no ``DP`` part.
        cp: (prefill) context-parallel index, ``None`` when absent.
        tp: tensor-parallel index (always present in the engines' names).
        stage: ``""`` or one of ``EXTEND`` / ``DECODE`` / ``MIXED`` (profile by stage).
        pp: pipeline-parallel index, ``None`` when absent.
        dcp: decode-context-parallel index (vLLM), ``None`` when absent.
        ep: expert-parallel index, ``None`` when absent.
        global_rank: vLLM's global worker rank (``rank<r>``); carried for the merge record, not
            part of the identity (the coordinates are) nor of the order.
    """

    dp: int | None = dataclasses.field(default=None, compare=False)
    cp: int | None = dataclasses.field(default=None, compare=False)
    tp: int = dataclasses.field(default=0, compare=False)
    stage: str = dataclasses.field(default="", compare=False)
    pp: int | None = dataclasses.field(default=None, compare=False)
    dcp: int | None = dataclasses.field(default=None, compare=False)
    ep: int | None = dataclasses.field(default=None, compare=False)
    global_rank: int | None = dataclasses.field(default=None, compare=False)
    _key: tuple = dataclasses.field(init=False, repr=False, compare=True)

    def __post_init__(self) -> None:
        dims = (self.dp, self.pp, self.cp, self.tp, self.dcp, self.ep)
        object.__setattr__(self, "_key", (*map(_none_first, dims), self.stage))

    def __str__(self) -> str:
        before = (("DP", self.dp), ("PP", self.pp), ("CP", self.cp))
        after = (("DCP", self.dcp), ("EP", self.ep))
        parts = [f"{name}{value}" for name, value in before if value is not None]
        parts.append(f"TP{self.tp}")
        parts += [f"{name}{value}" for name, value in after if value is not None]
        parts += [self.stage] if self.stage else []
        return "-".join(parts)

    @classmethod
    def parse(cls, text: str) -> "RankTag":
        """Parses ``TP1``, ``DP0-CP1-TP3``, ``DP0-PP1-TP2-EP0``, ``TP0-DECODE``, the legacy ``TP-1``
        or SGLang's ``TP-1-DP-0-EP-1``.

        Raises:
            ValueError: ``text`` is not a rank tag.
        """
        match = _TAG_RE.match(text)
        if not match:
            raise ValueError(
                f"not a rank tag: {text!r} (expected e.g. TP1, DP0-CP1-TP3, DP0-PP1-TP2-EP0, TP0-DECODE)"
            )
        return cls.from_match(match)

    @classmethod
    def from_match(cls, match: re.Match) -> "RankTag":
        """Builds a tag from a match of :data:`TAG_PATTERN` (named groups dp, pp, cp, tp, dcp, ep,
        stage and SGLang's dp2, pp2)."""
        groups = match.groupdict()
        stage = groups["stage"] or ""
        return cls(
            dp=_int_or_none(groups["dp"] if groups["dp"] is not None else groups["dp2"]),
            pp=_int_or_none(groups["pp"] if groups["pp"] is not None else groups["pp2"]),
            cp=_int_or_none(groups["cp"]),
            tp=int(groups["tp"]),
            dcp=_int_or_none(groups["dcp"]),
            ep=_int_or_none(groups["ep"]),
            stage=_STAGE_ALIASES.get(stage, stage),
        )

    @classmethod
    def from_vllm(cls, match: re.Match) -> "RankTag":
        """Builds a tag from a match of :data:`VLLM_TAG_PATTERN`; vLLM writes every dimension."""
        return cls(
            dp=int(match["dp"]), pp=int(match["pp"]), tp=int(match["tp"]), dcp=int(match["dcp"]),
            ep=int(match["ep"]), global_rank=int(match["rank"]),
        )

    def as_args(self) -> dict:
        """The tag as the ``args`` fields of the ``tokentrace.rank`` instant."""
        return {
            "rank": str(self), "dp": self.dp, "pp": self.pp, "cp": self.cp, "tp": self.tp,
            "dcp": self.dcp, "ep": self.ep, "stage": self.stage, "global_rank": self.global_rank,
        }


def _none_first(value: int | None) -> int:
    return -1 if value is None else value


def _int_or_none(text: str | None) -> int | None:
    return None if text is None else int(text)
