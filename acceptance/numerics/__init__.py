"""The mathematics: metrics, dual-delta statistics, device arithmetic emulated on the CPU, float64 and mpmath
oracles."""
