"""`cheaptune ui`: a local, read-only web dashboard over the run registry and plan files."""
