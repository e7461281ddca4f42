"""The hermesd command line: ``common`` (what every command shares), ``main`` (the parser),
one module per group of commands."""
