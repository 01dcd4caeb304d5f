//! P2: exact representability of a float path.
