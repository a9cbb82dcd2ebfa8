"""Context policies: when and how an episode's context is compacted."""
