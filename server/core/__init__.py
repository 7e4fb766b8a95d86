"""The core of the server: the Lens service, the store, security, settings, errors, upload
staging and the executor. It imports no surface."""
