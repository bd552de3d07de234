"""The fake a test holds (``FakeQStash``), what it reads of it, and its failure report."""
