"""Typed contracts (pydantic request and response models) of the platform's services.

One module per service; services import their models from here and the clients in
``shared.clients`` return them, so both sides of every call share one definition.
Nothing here imports ``services``.
"""
