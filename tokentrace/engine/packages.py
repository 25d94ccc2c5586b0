"""PerfettoSQL packages as the engine receives them from its caller, and their registration.

The engine owns no SQL of its own: whoever opens a trace passes the packages it wants
``INCLUDE PERFETTO MODULE`` to find (the catalogue passes the bundled ``tokentrace`` package).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType

from tokentrace.errors import EngineError

# Perfetto's answer (v52's wording) when the name is taken, e.g. "Package 'tokentrace' is
# already registered. Choose a different name. ...".
ALREADY_REGISTERED = "is already registered"


@dataclass(frozen=True)
class SqlPackage:
    """A PerfettoSQL package: its name, its modules' text and, optionally, the folder they are in.

    Attributes:
        name: the package name, the first part of every module name (``"tokentrace"``).
        modules: ``{"tokentrace.ranks": "<sql text>", ...}``; registered over RPC.
        root: the folder holding the package's ``.sql`` files (``<root>/ranks.sql`` for
            ``tokentrace.ranks``); the native shell reads them itself through
            ``--add-sql-package ROOT@NAME`` when it is given, else the modules go over RPC.

    Raises:
        ValueError: the name is empty, or a module name does not start with ``name.``
            (Perfetto would refuse it at registration, with a vaguer message).
    """

    name: str
    modules: Mapping[str, str]
    root: Path | None = None

    def __post_init__(self) -> None:
        if not self.name:
            raise ValueError("an SQL package needs a name")
        foreign = sorted(m for m in self.modules if not m.startswith(f"{self.name}."))
        if foreign:
            raise ValueError(f"SQL package {self.name!r}: module names must start with "
                             f"'{self.name}.', got {', '.join(foreign[:3])}")
        # A read-only copy: the dataclass is frozen, its contents should be too.
        object.__setattr__(self, "modules", MappingProxyType(dict(self.modules)))
        if self.root is not None:
            object.__setattr__(self, "root", Path(self.root))

    def __repr__(self) -> str:  # the SQL text would swamp any message or log line
        return f"SqlPackage({self.name!r}, {len(self.modules)} modules, root={self.root!r})"


def register_packages(client, packages: Sequence[SqlPackage], where: str) -> None:
    """Registers each package over ``client``'s RPC (``TPM_REGISTER_SQL_PACKAGE``); a package
    of that name already there is kept.

    Args:
        client: a :class:`tokentrace.engine.rpc.RpcClient`.
        packages: what to register, in order.
        where: the trace processor in words, for the message (``"the embedded trace processor"``).

    Raises:
        EngineError: Perfetto refused a package (a module that does not parse, say).
    """
    for package in packages:
        error = client.register_sql_package(package.name, package.modules)
        if error and ALREADY_REGISTERED not in error:
            raise EngineError(f"{where} refused SQL package {package.name!r}: {error}")
        # Already registered: a server reused without a new trace still holds the copy an
        # earlier session gave it. Kept, not overridden: an override makes the next INCLUDE of
        # a module included before fail (its tables exist). A new trace drops the old copy.
