"""Recompilation storms: detection, length buckets, real lengths, images, the compile budget and the fix
kinds (``fixes``); the advice that reads a session's phases is ``session/storm_analysis.py``."""
