"""Train one experiment: ``python scripts/train.py [key=value ...]`` (the same as ``graphfuse-train``).

Examples:
    python scripts/train.py                                   # GCN on Cora (experiment=gcn_cora)
    python scripts/train.py experiment=gcn_cora model.hidden=64 trainer.max_epochs=100
"""

from graphfuse.trainers.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
