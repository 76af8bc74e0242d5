"""The session: what happened in each phase, call by call (phases, recording, the ledger, repeat calls),
what the storms and the compile budget say of it, and the report built from its snapshot."""
