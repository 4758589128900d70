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
    def __init__(self, initial=0):
        self.initial = initial
        self.ghost = {}
        self.writer = {}
        self.touched = set()
        self.reads = 0
        self.writes = 0

    def value(self, line):
        return self.ghost.get(line, self.initial)

    def write(self, line, value, who):
        self.ghost[line] = value
        self.writer[line] = who
        self.touched.add(line)
        self.writes += 1

    def read(self, line, value, who):
        self.reads += 1
        self.touched.add(line)
        if value != self.value(line):
            raise InvariantViolation(
                f"data value: {who} read {value} from line {line:#x}, but the last write serialized was "
                f"{self.value(line)} (by {self.writer.get(line, 'initial memory')})")

    def read_at_serialization(self, line, value, who):
        """A read checked when it was serialized (the host compared it then); nothing to do now."""
        self.reads += 1

    def key(self):
        return tuple(sorted(self.ghost.items()))
