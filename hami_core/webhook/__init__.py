"""Admission logic of the mutating webhook, pure and testable without a server."""

from .admission import Admission, AdmissionResult

__all__ = ["Admission", "AdmissionResult"]
