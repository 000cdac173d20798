"""Training: configs → data, model, Lightning Trainer. Nothing else in graphfuse imports this package.

Modules: ``config`` (schema, ``load_config``, ``ConfigError``), ``build`` (config sections → objects),
``datamodule`` (full-graph batches), ``module`` (``NodeClassifier``), ``run`` (``train(cfg)``), ``cli``
(``graphfuse-train``).
"""
