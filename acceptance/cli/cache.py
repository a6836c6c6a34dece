"""``acceptance cache info|clear``: the reference cache folder (:mod:`acceptance.cache`).

Registered on the command group of :mod:`acceptance.cli.group`.
"""

from __future__ import annotations

import click

from acceptance.cli.group import main


@main.group("cache")
def cache_group() -> None:
    """The reference cache: what one run keeps for the next (references and measurements).

    Generated inputs, baseline and oracle outputs, and each case's measurement, reused only when a re-run's impl
    and references answer the same bytes in every trial. Folder: $ACCEPTANCE_CACHE_DIR, else the platform's user
    cache folder."""


@cache_group.command("info")
def cache_info() -> None:
    """Where the cache is, how many entries and bytes it holds, and its size cap."""
    info = _cache().info()
    click.echo(f"folder:   {info.root}")
    click.echo(f"entries:  {info.entries}")
    click.echo(f"size:     {info.bytes / 2**20:.1f} MiB of {info.max_bytes / 2**20:.0f} MiB (cap)")
    if info.stale_bytes:
        click.echo(f"stale:    {info.stale_bytes / 2**20:.1f} MiB (other format versions, temporary files)")


@cache_group.command("clear")
def cache_clear() -> None:
    """Remove every entry (of any format version) from the cache folder."""
    cache = _cache()
    removed = cache.clear()
    click.echo(f"removed {removed} file(s) from {cache.root}")


def _cache():  # noqa: ANN202 - the cache class loads with torch
    from acceptance.session.run import reference_cache

    return reference_cache(True)
