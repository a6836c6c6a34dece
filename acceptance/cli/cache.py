"""``acceptance cache info|clear``: the reference cache's folder or URL (:mod:`acceptance.cache`).

Registered on the command group of :mod:`acceptance.cli.group`.
"""

from __future__ import annotations

import click

from acceptance.cli.group import main

_CACHE_DIR = click.option(
    "--cache-dir",
    metavar="DIR|URL",
    help="The cache's folder or URL (s3://bucket/prefix, file:///nfs/cache, ...) [default: $ACCEPTANCE_CACHE_DIR, "
    "else the user cache folder].",
)


@main.group("cache")
def cache_group() -> None:
    """The reference cache: what one run keeps for the next (references and measurements).

    Generated inputs, baseline and oracle outputs, and each case's measurement, reused only when a re-run's impl
    and references answer the same bytes in every trial. Location: --cache-dir, else $ACCEPTANCE_CACHE_DIR, else
    the platform's user cache folder; a URL (s3://, gs://, file://) puts it on storage that several machines
    share."""


@cache_group.command("info")
@_CACHE_DIR
def cache_info(cache_dir: str | None) -> None:
    """Where the cache is, how many entries and bytes it holds, and its size cap."""
    info = _cache(cache_dir).info()
    where = "url:     " if "://" in str(info.root) else "folder:  "
    click.echo(f"{where} {info.root}")
    click.echo(f"entries:  {info.entries}")
    click.echo(f"size:     {info.bytes / 2**20:.1f} MiB of {info.max_bytes / 2**20:.0f} MiB (cap)")
    if info.stale_bytes:
        click.echo(f"stale:    {info.stale_bytes / 2**20:.1f} MiB (other format versions, temporary files)")


@cache_group.command("clear")
@_CACHE_DIR
def cache_clear(cache_dir: str | None) -> None:
    """Remove every entry (of any format version) from the cache."""
    cache = _cache(cache_dir)
    removed = cache.clear()
    click.echo(f"removed {removed} file(s) from {cache.root}")


def _cache(cache_dir: str | None):  # noqa: ANN202 - the cache class loads with torch
    from acceptance.session.run import reference_cache

    return reference_cache(True, cache_dir)
