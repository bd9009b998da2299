"""Entry point: python3 -m tune_optuna --sampler NAME [--sampler-kwargs JSON]."""
import sys

from tune_optuna.searcher import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
