"""Runnable examples for profile-bridge (not part of the installed package)."""
