"""What judges another engine's sampler, chain or tree (``verify-oracle --sampler``, ``check_sampler``):
its exact law over every cell of a round's uniforms, in a sandbox, at sizes whose coverage is stated."""
