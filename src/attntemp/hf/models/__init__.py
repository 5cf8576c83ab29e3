"""Where ``--model`` comes from: a name, a local folder or a hub id, checked before anything loads
(:mod:`.where`), and the models shipped by name inside PyPI wheels (:mod:`.shipped`)."""
