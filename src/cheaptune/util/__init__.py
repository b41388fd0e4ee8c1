"""Small helpers shared by several stages (names, atomic files, paths, the hub switch)."""
