"""FastAPI routers and the pydantic wire schemas."""

from .routes import AUTH_DOC, router

__all__ = ["AUTH_DOC", "router"]
