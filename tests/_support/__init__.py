"""Helpers shared by several test folders, importable as ``tests._support`` from any test file.

pytest puts a test folder on ``sys.path`` only once it collects a test there, so a helper module
inside one folder (``tests/server/lens_testing.py``) is not importable from another folder's tests
when they run alone. This package sits on the rootdir path instead (pyproject's pytest
``pythonpath = ["."]``), so every folder reaches it the same way.
"""
