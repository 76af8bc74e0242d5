"""Recompilation storms: detection, advice, length buckets, real lengths, and the fix kinds (``fixes``)."""
