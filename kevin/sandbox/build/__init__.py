"""The build side: content-addressed ``load_inline`` builds, the object cache and the precompiled header."""
