"""Network edges of hami (extender, webhook): the only package that imports flask."""
