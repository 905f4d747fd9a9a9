"""Shipped pipeline files (package data); load one by name with `Pipeline.from_yaml("generic")`."""
