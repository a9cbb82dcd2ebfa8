"""Effects and predicates per app; every module here is imported by ``registry.load_ops``."""
