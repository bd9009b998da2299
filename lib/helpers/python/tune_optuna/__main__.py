"""Entry point: python3 -m tune_optuna --sampler NAME [--sampler-kwargs JSON]."""
import sys

from tune_optuna.searcher import main

if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except ConnectionResetError:  # stdin is a socket: a killed driver resets it (end of input)
        sys.exit(0)
