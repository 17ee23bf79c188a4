"""Models generated from openapi.yaml by datamodel-codegen (see models.py); do not edit."""
