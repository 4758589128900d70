"""Ghost state for the data-value invariant.

``ghost[line]`` is the last write serialized to the line: a device store performed under write
permission (granted by a GO-E), or an ItoMWr/WrInv at the host's GO.  Every read must return it; a
read whose data was fetched at an earlier serialization point (RdCurr) is checked there, so data still
in flight is pending, not wrong.
"""

__all__ = ["Checker", "InvariantViolation"]


class InvariantViolation(AssertionError):
    pass


class Checker:
    """The ghost state.  A read or write names who made it with a ``str.format`` template and its
    arguments (``who``, ``args``), formatted only when an error names it: the checks run for every read
    and write, their descriptions are needed only when one fails."""

    def __init__(self, initial=0):
        self.initial = initial
        self.ghost = {}
        self.writer = {}        # line -> (who, args) of the last write serialized
        self.touched = set()
        self.reads = 0
        self.writes = 0

    def value(self, line):
        return self.ghost.get(line, self.initial)

    def writer_of(self, line):
        """Who made the last write serialized to ``line``, or "initial memory"."""
        w = self.writer.get(line)
        return "initial memory" if w is None else w[0].format(*w[1])

    def write(self, line, value, who, args=()):
        self.ghost[line] = value
        self.writer[line] = (who, args)
        self.touched.add(line)
        self.writes += 1

    def read(self, line, value, who, args=()):
        self.reads += 1
        self.touched.add(line)
        if value != self.value(line):
            raise InvariantViolation(
                f"data value: {who.format(*args)} read {value} from line {line:#x}, but the last write "
                f"serialized was {self.value(line)} (by {self.writer_of(line)})")

    def read_at_serialization(self, line, value, who, args=()):
        """A read checked when it was serialized (the host compared it then); nothing to do now."""
        self.reads += 1

    def key(self):
        return tuple(sorted(self.ghost.items()))
