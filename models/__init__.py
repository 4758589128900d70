"""Python golden model of CXL.cache coherence.

``make fast-model`` compiles the hot modules (models/compiled.py); while that build matches the sources
it is imported in their place, else these ``.py`` files are."""

from .compiled import compiled_dir as _compiled_dir

_fast = _compiled_dir()
if _fast is not None:
    __path__.insert(0, str(_fast))
del _fast
