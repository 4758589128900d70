"""What every frozen parameter dataclass of the models shares: a copy with some fields changed, and its
fields as a dict (for JSON summaries and parameter files)."""

from dataclasses import fields, replace

__all__ = ["ParamSet"]


class ParamSet:
    """Mixin for a frozen ``@dataclass``; its ``__post_init__`` checks run again on every ``with_`` copy."""

    def with_(self, **changes):
        return replace(self, **changes)

    def as_dict(self):
        return {f.name: getattr(self, f.name) for f in fields(self)}
