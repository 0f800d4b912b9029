"""Clouds behind one small interface (providers.base.Provider). Knows nothing about jobs."""
