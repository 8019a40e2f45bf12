"""FastAPI routers and the pydantic wire schemas."""

from .routes import router

__all__ = ["router"]
