"""The console script ``tokentrace`` (also ``python -m tokentrace``).

Its first step holds the stop signals (:func:`tokentrace.runtime.signals.held_from_start`),
before the command line's modules are imported: a signal during the start then stops the
command once its handlers are in place, with 130/143 and one line, instead of SIGTERM's silent
default action or SIGINT's traceback from inside an import.
"""


def main() -> None:
    from tokentrace.runtime.signals import held_from_start

    held_from_start()
    from tokentrace.cli import main as cli_main

    cli_main()


if __name__ == "__main__":
    main()
