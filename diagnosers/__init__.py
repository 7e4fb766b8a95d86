"""Analysis core of Straggler Lens: trace readers, the trace model, the what-if engine, detectors.

Plain functions only: nothing here imports ``server`` or any HTTP/MCP library.
"""
