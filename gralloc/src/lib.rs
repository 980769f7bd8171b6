//! Buffer allocator and AIMapper v5 mapper over memfd.
