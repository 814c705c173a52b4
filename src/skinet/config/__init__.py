"""Pydantic config sections and loading of SkiNet YAML files: pydantic and YAML only."""
