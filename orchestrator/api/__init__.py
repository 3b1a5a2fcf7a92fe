"""The HTTP API service. ``create_app`` builds the FastAPI application."""

from .app import create_app

__all__ = ["create_app"]
