"""A fake database kind for the capture loop's fast tests: an in-memory database
(:mod:`tests.fakedb.database`) and the kind package over it (``options.RULES``,
``dialect.DIALECT``, :mod:`tests.fakedb.source`), registered by a test fixture as
``kinds.REGISTRY["fake"] = "tests.fakedb"``: adding a database is its package and one
registry line. A source's DSN ``fake:<name>`` names a database of :data:`DATABASES`."""

from tests.fakedb.database import FakeDatabase

DATABASES: dict[str, FakeDatabase] = {}
KIND = "fake"
PACKAGE = "tests.fakedb"
