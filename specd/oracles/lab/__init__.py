"""The failure lab: known-wrong engines and samplers (one component broken, or a peer's shipped bug
for chains, blocks and trees) that the oracle's own checks must catch and name, where a size can."""
