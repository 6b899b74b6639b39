"""One parser per input format: a file's bytes -> its rows, with an input record and every bad line accounted for."""
