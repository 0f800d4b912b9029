"""Lambda Cloud (REST v1 over httpx). ``settings`` is dependency-free; ``adapter`` holds LambdaProvider."""
