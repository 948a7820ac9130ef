"""Generate the URLFrontier Python modules from src/scrapeq/interfaces/frontier/urlfrontier.proto.

The generated ``urlfrontier_pb2.py``, ``urlfrontier_pb2.pyi`` and ``urlfrontier_pb2_grpc.py``
are committed, so nothing is generated at run time; this script (needs grpcio-tools) writes
them, and ``--check`` compares what it would write with the committed files (exit 1 when
they differ). ``--out DIR`` writes into another source root (the check's temporary one).
"""

from __future__ import annotations

import argparse
import filecmp
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "src"
PROTO = Path("scrapeq/interfaces/frontier/urlfrontier.proto")
OUTPUTS = ("urlfrontier_pb2.py", "urlfrontier_pb2.pyi", "urlfrontier_pb2_grpc.py")


def generate(out_root: Path) -> list[Path]:
    """Write the modules under ``out_root`` (a source root: the package folders inside it)."""
    from grpc_tools import protoc

    folder = out_root / PROTO.parent
    folder.mkdir(parents=True, exist_ok=True)
    args = [
        "protoc",
        f"-I{SRC}",
        f"-I{Path(protoc.__file__).parent / '_proto'}",
        f"--python_out={out_root}",
        f"--pyi_out={out_root}",
        f"--grpc_python_out={out_root}",
        str(PROTO),
    ]
    if protoc.main(args) != 0:
        raise SystemExit("scripts/gen_frontier.py: protoc failed")
    return [folder / name for name in OUTPUTS]


def check() -> list[str]:
    """The committed files that differ from what :func:`generate` writes."""
    with tempfile.TemporaryDirectory() as tmp:
        written = generate(Path(tmp))
        return [
            str(PROTO.parent / p.name)
            for p in written
            if not filecmp.cmp(p, SRC / PROTO.parent / p.name, shallow=False)
        ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare, write nothing")
    parser.add_argument("--out", type=Path, default=SRC, help="source root to write into")
    args = parser.parse_args(argv)
    if args.check:
        stale = check()
        for name in stale:
            print(f"{name}: differs from what scripts/gen_frontier.py writes", file=sys.stderr)
        return 1 if stale else 0
    generate(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
