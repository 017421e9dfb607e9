"""`python -m corpusprep` and the `corpusprep` command."""

import sys


def main() -> None:
    try:
        from corpusprep.app import cli
    except KeyboardInterrupt:  # a Ctrl-C while Python imports (the first ~0.1 s): no run began
        print("corpusprep: error: interrupted", file=sys.stderr)
        sys.exit(130)
    cli()


if __name__ == "__main__":
    main()
