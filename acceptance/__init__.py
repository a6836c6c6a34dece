"""Operator accuracy acceptance and CI gating."""

__version__ = "0.1.0"
