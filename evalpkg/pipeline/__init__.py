"""The five-stage evaluation pipeline: normalize, execute, record, score, cluster."""
