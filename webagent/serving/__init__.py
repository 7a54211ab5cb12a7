"""What every listener of ours shares (``webagent mcp --http``, ``webagent env serve``).

``gate.py`` is the ASGI app in front of a server's own: the ``Host`` and ``Origin`` checks against
DNS rebinding and the bearer token, on HTTP requests and WebSocket handshakes alike, and who the
client is (``client_of``). ``tokens.py`` is where a server's tokens come from (``--auth-token``,
``--auth-token-file``, an environment variable) and the rule that a server reachable beyond this
machine needs one. Nothing here imports a feature; ``tokens.py`` imports no web framework (the
command line's parser uses it).
"""
