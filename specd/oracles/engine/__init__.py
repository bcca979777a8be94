"""What judges the engine: production's own rounds, chains and trees under every rule, against the
oracle's rule, by exact enumeration of every cell, in rationals, by Monte Carlo and by proof."""
