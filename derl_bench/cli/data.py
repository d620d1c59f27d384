"""``derl-bench data``: download and verify benchmark datasets."""

from __future__ import annotations

import argparse
import sys
import urllib.parse
from pathlib import Path

from derl_bench.cli._errors import CommandError
from derl_bench.data.root import COMPLETE_MARKER, data_root, is_complete
from derl_bench.data.sources import dataset, datasets

MIRROR_SCHEMES = ("http", "https", "ftp", "file")
"""What urllib fetches; a mirror given as anything else must be a local folder."""


def _names(requested: list[str]) -> list[str]:
    if not requested or requested == ["all"]:
        return sorted(datasets())
    for name in requested:
        dataset(name)  # raises with the known names
    return requested


def _root_and_names(args: argparse.Namespace) -> tuple[Path, list[str]]:
    root = args.root or data_root()
    if root.exists() and not root.is_dir():
        raise CommandError(f"the data root {root} is a file, not a folder")
    try:
        return root, _names(args.names)
    except KeyError as err:
        raise CommandError(err.args[0]) from None


def mirror_url(text: str) -> str:
    """``--mirror`` as a URL: a URL as it is, an existing folder as its ``file://`` URL.

        >>> mirror_url("https://example.org/data/")
        'https://example.org/data/'
        >>> mirror_url("/")
        'file:///'
    """
    if urllib.parse.urlsplit(text).scheme.lower() in MIRROR_SCHEMES:
        return text
    folder = Path(text).expanduser()
    if folder.is_dir():
        return folder.resolve().as_uri()
    what = "is a file" if folder.exists() else "does not exist"
    raise CommandError(f"--mirror: {text} is not a URL ({', '.join(MIRROR_SCHEMES)}) and "
                       f"{what}; give a URL or a folder in the upstream layout")


def _download(args: argparse.Namespace) -> int:
    from derl_bench.data.download import DownloadError, download

    root, names = _root_and_names(args)
    mirror = mirror_url(args.mirror) if args.mirror else None
    for name in names:
        print(f"{name}: downloading into {root / name}"
              + (f" from {mirror}" if mirror else ""))
        try:
            results = download(name, root, mirror=mirror, force=args.force,
                               show_progress=not args.quiet)
        except DownloadError as err:
            print(f"error: {err}", file=sys.stderr)
            return 1
        for r in results:
            print(f"  {r.name:<14} {r.count:>6}  {r.sha256 or '-'}")
    return 0


def _verify(args: argparse.Namespace) -> int:
    from derl_bench.data.verify import verify_dataset

    root, names = _root_and_names(args)
    failed = 0
    print(f"data root: {root}")
    for name in names:
        for r in verify_dataset(dataset(name), root):
            status = "ok" if r.ok else f"FAIL ({r.problem})"
            print(f"{name:<13} {r.name:<14} {r.count:>6}  {r.sha256 or '-':<64}  {status}")
            failed += not r.ok
        if not is_complete(name, root):
            # The envs load only a dataset whose download finished, whatever its files say.
            print(f"{name:<13} {'complete':<14} {'':>6}  {'-':<64}  FAIL (no {COMPLETE_MARKER} "
                  f"marker: the download did not finish; run `derl-bench data download {name}`)")
            failed += 1
    if failed:
        print(f"{failed} check(s) failed", file=sys.stderr)
    return 1 if failed else 0


def _list(args: argparse.Namespace) -> int:
    for name, spec in sorted(datasets().items()):
        print(f"{name:<13} {spec.description} [{spec.licence}]")
        for source in spec.sources:
            print(f"  {source.path:<34} {source.url}")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``derl-bench data {download,verify,list}``."""
    parser = sub.add_parser("data", help="download and verify benchmark datasets",
                            description="Download and verify benchmark datasets in the data root "
                            "($DERL_BENCH_DATA, else ~/.cache/derl-bench/data).")
    data_sub = parser.add_subparsers(dest="data_command", metavar="ACTION", required=True)
    names_help = f"datasets ({', '.join(sorted(datasets()))}, or all; default all)"

    dl = data_sub.add_parser("download", help="fetch datasets from upstream or a mirror",
                             description="Fetch datasets (atomic, sha256-checked, resumable).")
    dl.add_argument("names", nargs="*", metavar="NAME", help=names_help)
    dl.add_argument("--mirror", metavar="URL", help="fetch the same layout from this base URL, "
                    "or from a local folder")
    dl.add_argument("--root", type=lambda text: Path(text).expanduser().resolve(),
                    help="data root (default: $DERL_BENCH_DATA)")
    dl.add_argument("--force", action="store_true", help="download again even if complete")
    dl.add_argument("--quiet", action="store_true", help="no progress bars")
    dl.set_defaults(func=_download)

    vf = data_sub.add_parser("verify", help="print counts and checksums; fail on any mismatch",
                             description="Count and checksum every split and check that the "
                             "download finished; exit 1 on a mismatch.")
    vf.add_argument("names", nargs="*", metavar="NAME", help=names_help)
    vf.add_argument("--root", type=lambda text: Path(text).expanduser().resolve(),
                    help="data root (default: $DERL_BENCH_DATA)")
    vf.set_defaults(func=_verify)

    ls = data_sub.add_parser("list", help="list known datasets and their upstream URLs",
                             description="List known datasets and their upstream URLs.")
    ls.set_defaults(func=_list)
