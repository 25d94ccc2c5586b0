"""``tokentrace cache [list|clear]``: what the user cache holds, and emptying it.

The user cache (``$TOKENTRACE_CACHE_DIR``, else ``~/.cache/tokentrace``) holds every merge of a
profile folder (``open``, ``analyze``, ``view``, ``diff``), annotated copies and the compiled
engine; it is bounded in bytes (``$TOKENTRACE_CACHE_SIZE``, default 2 GiB), least recently used
merges dropped first (:mod:`tokentrace.merge.cache_size`).
"""

from __future__ import annotations

import typer

from tokentrace.cli.app import app, user_errors

cache_app = typer.Typer(help="Show or empty the user cache of merged profile folders "
                             "($TOKENTRACE_CACHE_DIR, else ~/.cache/tokentrace).",
                        no_args_is_help=False, invoke_without_command=True)
app.add_typer(cache_app, name="cache")


@cache_app.callback(invoke_without_command=True)
def _default(ctx: typer.Context) -> None:
    """Show or empty the user cache (default: list)."""
    if ctx.invoked_subcommand is None:
        list_cache()


@cache_app.command("list")
def list_cache() -> None:
    """List the cached merges (least recently used first), their sizes and sources, and the bound."""
    from tokentrace.merge.cache_size import SIZE_ENV, age, human, usage

    with user_errors():
        found = usage()
    print(f"cache: {found.root}  ({human(found.total)} of {human(found.limit)}; "
          f"${SIZE_ENV} sets the bound)")
    for entry in found.entries:
        print(f"  merged/{entry.path.name}  {human(entry.bytes):>10}  {age(entry.used):<12}  "
              f"{entry.source or ('left by a killed merge: removed by the next merge' if entry.stale else '?')}")
    if not found.entries:
        print("  no merged profile folder")
    for name, size in found.folders.items():
        what = "annotated copies (tokentrace view)" if name == "annotated" else "compiled engine"
        print(f"  {name}/  {human(size):>10}  {what}")


@cache_app.command("clear")
def clear_cache(
    all_files: bool = typer.Option(False, "--all", help="Also remove the compiled engine (the next run compiles it again, ~10 s)."),
) -> None:
    """Remove every cached merge and annotated copy (what tokentrace wrote there, nothing else)."""
    from tokentrace.merge.cache_size import clear, human
    from tokentrace.runtime.files import cache_root

    with user_errors():
        count, freed = clear(modules=all_files)
    print(f"removed {count} cache entr{'y' if count == 1 else 'ies'} ({human(freed)}) from {cache_root()}")
