"""RunPod (GraphQL over httpx), on-demand pods only.

``settings`` is dependency-free; ``adapter`` holds RunPodProvider.
"""
