"""The memory as MCP tools (`a2e-host mcp`): the tools (`server.py`), their bearer gate
(`auth.py`) and the app that owns the store under them (`app.py`)."""
