"""What runs on an instance: the rendered startup script, the on-node agent, and how both get there.

Light on purpose: importing this package imports nothing heavy. See docs/runtime.md.
"""
