"""The exactness oracle: exact enumeration, seeded Monte Carlo, parity checks and
a failure lab, all driving the production engine on TableModel fixtures."""
