"""``python -m attncore.kernels --serve``: the CPU memory-measuring helper (``memory.serve``)."""

from __future__ import annotations

import sys

from attncore.kernels.memory import serve


def main() -> None:
    """Run the helper; anything but ``--serve`` prints the usage."""
    if sys.argv[1:] != ["--serve"]:
        sys.exit("usage: python -m attncore.kernels --serve  (the memory-measuring helper)")
    serve()


if __name__ == "__main__":
    main()
