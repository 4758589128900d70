"""A speed helper for the golden model's hot code."""

__all__ = ["Members"]


class Members:
    """An enum's members as plain instance attributes, for hot code: ``Enum.X`` goes through the enum
    metaclass (~0.2 us a lookup in CPython 3.11), ``Members(Enum).X`` is a dict lookup.  The attributes
    are the members themselves."""

    def __init__(self, enum_cls):
        self.__dict__.update(enum_cls.__members__)
