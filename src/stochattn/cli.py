"""The console script ``stochattn``: one command per subcommand module.

    stochattn audit <table-or-figure>     the chain of files behind a table or figure (stochattn.audit)
    stochattn download [--configfile ...]  stage every public file a configuration needs (stochattn.staging)
    stochattn preflight [--profile slurm]  the plan under a cluster profile, checked against SLURM (stochattn.preflight)
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence

COMMANDS = {"audit": "stochattn.audit", "download": "stochattn.staging", "preflight": "stochattn.preflight"}


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``stochattn <command> <arguments>``; its exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] not in COMMANDS:
        print(__doc__.split("\n\n")[1].rstrip(), file=sys.stderr)
        return 0 if argv[:1] in (["-h"], ["--help"]) else 2
    return importlib.import_module(COMMANDS[argv[0]]).main(argv[1:])


def cli() -> None:
    """Console script entry point."""
    sys.exit(main())


if __name__ == "__main__":
    cli()
